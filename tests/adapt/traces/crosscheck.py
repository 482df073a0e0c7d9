# crosscheck.py: an independent re-implementation (plain Python, no dependencies) of the GraVAC
# rules documented in adapt/gv_adapt.h, used to cross-check the decision runs asserted by
# test_adapt_trace.c on resnet_sim.csv. Not part of the build or of ctest.
#   python3 tests/adapt/traces/crosscheck.py tests/adapt/traces/resnet_sim.csv
# prints, for each replayed configuration, the runs {first iteration, level, CF sent, floor,
# candidate} in the test's format. Default options only (theta_s0 2, no warm-up, tp_alpha 0,
# floor raise only for an eligible candidate).
import csv, sys, math
def load(path):
    rows=[r for r in csv.reader(l for l in open(path) if not l.startswith('#'))]
    h=rows[0]; return h, [[float(x) for x in r] for r in rows[1:]]
CFS=[10,20,40,80,160,320,640,1000,1280,2000]
def ladder(tmin,tmax,s0,pol):
    r=[tmin]; s=s0
    while r[-1]<tmax:
        cf=tmin*s
        if not cf<tmax: cf=tmax
        r.append(cf); s = s*s if pol=='exp' else 2*s
    return r
def run(path,tmin,tmax,pol,window,eps,omega,alpha=0.0):
    h,rows=load(path); ix={k:i for i,k in enumerate(h)}
    R=ladder(tmin,tmax,2.0,pol); top=len(R)-1
    fl,ca=0,1 if top>=1 else 0
    smin=scand=0.0; mk=ck=False
    level='D'; tp={}  # key rung or 'd'
    win=0; out=[]
    for it,r in enumerate(rows):
        thmin=R[fl]; cand=R[ca]
        cf = 1.0 if level=='D' else (thmin if level=='F' else cand)
        out.append((it,level,cf,thmin,cand))
        N=r[ix['workers']]; a = alpha if alpha>0 else min(1.0,N/100.0)
        ef=r[ix['norm2_ef']]
        nmin=ef*r[ix['k_%g'%thmin]]
        ncand=ef*r[ix['k_%g'%cand]] if ca>fl else 0.0
        if ef>0:
            rm=min(1.0,nmin/ef); smin = a*rm+(1-a)*smin if mk else rm; mk=True
            if ca>fl:
                rc=min(1.0,ncand/ef); scand = a*rc+(1-a)*scand if ck else rc; ck=True
        tcomm = r[ix['tc_1']] if level=='D' else r[ix['tc_%g'%cf]]
        titer = r[ix['t_compute']]+tcomm+(0 if level=='D' else r[ix['t_compress']])
        if titer>0:
            tsys=r[ix['samples']]/titer
            if level=='D': tp['d']=tsys*1.0
            elif level=='F': tp[fl]=tsys*smin
            else: tp[ca]=tsys*scand
        win+=1
        if win>=window:
            win=0; ev=ca
            if ev>fl and ck and mk and smin>0:
                gap=abs(smin-scand)/smin
                if gap<=omega and scand>=eps: fl=ev; smin=scand
            ca = ev+1 if ev<top else top
            ranked=sorted([(-tp[k],k) for k in tp if k!='d' and k>=fl])
            if len(ranked)>=2:
                t1,t2=-ranked[0][0],-ranked[1][0]
                if t2>0 and (t1-t2)/t2<=omega: ca=min(ranked[0][1],ranked[1][1])
            if ca!=ev or ca==fl: ck=False; scand=0.0
        if ca>fl and ck and scand>=eps: level='C'
        elif mk and smin>=eps: level='F'
        else: level='D'
    runs=[]
    for s in out:
        if runs and runs[-1][1:]==s[1:]: continue
        runs.append(s)
    return runs
if __name__=='__main__':
    p=sys.argv[1]
    for args in [(10,1000,'exp',80,0.9,0.01),(10,2000,'geo',80,0.7,0.01)]:
        rr=run(p,*args); print(args,len(rr))
        for x in rr: print('        {%d, %s, %g, %g, %g},'%(x[0],x[1],x[2],x[3],x[4]))
