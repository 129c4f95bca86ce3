"""calib_spectrum.py: the fraction of each layer's and KV head's key and value energy E||x||^2
kept by the top r principal axes of a version 4 calibration file (docs/calibration-format.md;
the lowrank codec's projections, docs/codecs-lowrank.md): mean and minimum over (layer, KV head).
For keys the eigenvalues are those of the query-weighted moment S E[k k^T] S: the fraction is of
the expected squared score q.k that the top r axes keep.
Usage: python3 scripts/calib_spectrum.py FILE.vqc   (numpy)"""
import numpy as np, sys
b=open(sys.argv[1],'rb').read()
assert b[:8]==b'VQCALIB\0' and int.from_bytes(b[8:12],'little')==4, 'not a version 4 calibration file'
L,Hq,H,d=np.frombuffer(b[88:104],dtype=np.uint32)
L,Hq,H,d=int(L),int(Hq),int(H),int(d)
off=128
def take(n):
    global off
    a=np.frombuffer(b[off:off+4*n],dtype=np.float32); off+=4*n; return a
take(L*H*d//2); take(L*H*d); take(L*H*d); take(L*H*d); take(L*Hq*d); take(L*Hq*d); take(L*H*d); take(L)
ke=take(L*H*d).reshape(L,H,d); take(L*H*d*d); take(L*H*d*d); ve=take(L*H*d).reshape(L,H,d); take(L*H*d*d)
assert off+4==len(b)
for name,e in (("K",ke),("V",ve)):
    c=np.cumsum(e,axis=2)/e.sum(axis=2,keepdims=True)
    for r in (8,16,24,32,48):
        v=c[:,:,r-1]
        print(f"{name} r={r}: energy kept mean {v.mean():.4f} min {v.min():.4f} (layer {np.unravel_index(v.argmin(),v.shape)})")
