/* issue30-kq512-microbench.c (docs/experiments/issue30-kquants-512.md): the 256-bit VNNI row kernels
 * (vq_rows_{q4_k,q6_k}_avx512vnni) against the 512-bit ones (_avx512z) on the same random blocks and
 * activations, thread CPU time, 24 rotating 2048x2048 matrices, the two arms alternating, 9 repeats. */
#include "kernels/kernels_impl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef void (*fn_t)(const uint8_t *, size_t, int, const void *, size_t, int, int, float *, int);
static double now(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int type=atoi(argv[1]), nt=atoi(argv[2]); const char*nm=argv[3];
  fn_t A = !strcmp(nm,"q4k")? vq_rows_q4_k_avx512vnni : !strcmp(nm,"q6k")? vq_rows_q6_k_avx512vnni : !strcmp(nm,"q40")? vq_rows_q4_0_avx512vnni : vq_rows_q8_0_avx512vnni;
  fn_t B = !strcmp(nm,"q4k")? vq_rows_q4_k_avx512z : !strcmp(nm,"q6k")? vq_rows_q6_k_avx512z : A;
  int rows=2048, cols=2048, nb=cols/32, NM=24; /* 24 matrices: > LLC */
  size_t rb=vq_wtype_row_bytes(type,cols);
  uint8_t *W=malloc(rb*rows*NM); srand(1);
  for(size_t i=0;i<rb*rows*NM;i++) W[i]=rand();
  /* make every f16 a sane value: overwrite via to_float-check is overkill; zero exponents top bits */
  for(size_t i=1;i<rb*rows*NM;i+=2) W[i]&=0x3b;
  size_t qs=vq_q8act_stride(nb); uint8_t *xa=aligned_alloc(64,qs*nt);
  float *x=malloc(4*cols); for(int t=0;t<nt;t++){for(int i=0;i<cols;i++)x[i]=(rand()%2001-1000)/1000.f; vq_q8act_quantize(x,cols,xa+qs*t);}
  float *Y=malloc(4*rows*nt), *Y2=malloc(4*rows*nt);
  double ta[9],tb[9];
  for(int rep=0;rep<9;rep++){
    double t0=now(); for(int m=0;m<NM;m++) A(W+rb*rows*m,rb,rows,xa,qs,nt,nb,Y,rows); double t1=now();
    for(int m=0;m<NM;m++) B(W+rb*rows*m,rb,rows,xa,qs,nt,nb,Y2,rows); double t2=now();
    ta[rep]=(t1-t0)/NM*1e6; tb[rep]=(t2-t1)/NM*1e6;
  }
  int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
  qsort(ta,9,8,cmp); qsort(tb,9,8,cmp);
  double bytes=(double)rb*rows;
  printf("%s nt=%d 2048x2048 us/matrix: old %.0f [%.0f,%.0f] (%.1f GB/s)  new %.0f [%.0f,%.0f] (%.1f GB/s) speedup %.2f  same=%d\n",nm,nt,ta[4],ta[0],ta[8],bytes/ta[4]/1e3,tb[4],tb[0],tb[8],bytes/tb[4]/1e3,ta[4]/tb[4],memcmp(Y,Y2,4*rows*nt)==0);
}
