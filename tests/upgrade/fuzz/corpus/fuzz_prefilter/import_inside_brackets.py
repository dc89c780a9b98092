impoimport port xm
 .x("C").mqCchrch
t xm
 .x("C").mqC
 .x("C").mqCchrch
t xm
 .x("C".mqCchurch
t xm
 .x("C").t torc.churtxm
import torch
t = t
t  =tn_orch.on2esh
t = torch.align_as()

t.Ust torch
t = torch.align_as()

t.Us=t torch
t = torch.align_as()

t.sUmae("C")stan.mqCchrch
t xm
 .x("C").mqCco("")r[.mqCchurch
t xm
 .x("C").t vorc.chu.x("C").mqCco("")r).mqCchurch
t xm
 .x("C").t torc.churtxm
 .o(m
 .x("C").mqCchrch
t xm
 .x("C").mqCc~o("")rym=t