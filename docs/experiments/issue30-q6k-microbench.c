/* issue30-q6k-microbench.c (docs/weights-kquants.md, x16 section): vq_rows_q6_k_avx512z alone on random
 * Q6_K rows, thread CPU time per matrix, NM rotating matrices (more than the L3 for "from memory"),
 * median [min,max] of 9, and a hash of the outputs (bits must match between builds). Build it once
 * against each tree and alternate the two binaries:
 *   gcc -O2 -Isrc -Iinclude docs/experiments/issue30-q6k-microbench.c -o /tmp/mb_new \
 *       build/libvq_kernels.a build/libvq_core.a -lm -fopenmp
 *   /tmp/mb_new ROWS COLS NM TOKENS      e.g. 3072 8192 6 1 */
#include "kernels/kernels_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int rows=atoi(argv[1]), cols=atoi(argv[2]), NM=atoi(argv[3]), nt=atoi(argv[4]), R=9, nb=cols/32;
  size_t rb=vq_wtype_row_bytes(VQ_TYPE_Q6_K,cols);
  uint8_t *W=malloc(rb*rows*NM); srand(1);
  for(size_t i=0;i<rb*rows*NM;i++) W[i]=rand();
  for(size_t i=1;i<rb*rows*NM;i+=2) W[i]&=0x3b;
  size_t qs=vq_q8act_stride(nb); uint8_t *xa=aligned_alloc(64,qs*nt);
  float *x=malloc(4*cols); for(int t=0;t<nt;t++){for(int i=0;i<cols;i++)x[i]=(rand()%2001-1000)/1000.f; vq_q8act_quantize(x,cols,xa+qs*t);}
  float *Y=malloc(4*rows*nt); double tt[9];
  for(int rep=0;rep<R;rep++){ double t0=now(); for(int m=0;m<NM;m++) vq_rows_q6_k_avx512z(W+rb*rows*m,rb,rows,xa,qs,nt,nb,Y,rows); tt[rep]=(now()-t0)/NM*1e6; }
  qsort(tt,R,8,cmp); unsigned h=0; for(size_t i=0;i<(size_t)rows*nt;i++){unsigned u; memcpy(&u,Y+i,4); h=h*31+u;}
  printf("%dx%d nt=%d NM=%d: %.0f [%.0f,%.0f] us/matrix (%.1f GB/s) hash %08x\n",rows,cols,nt,NM,tt[4],tt[0],tt[8],(double)rb*rows/tt[4]/1e3,h);
}
