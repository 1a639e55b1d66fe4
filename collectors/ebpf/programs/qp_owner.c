// QP ownership from the RDMA control path (kprobes; compiled everywhere, attached where the kernel allows).
//
// The uverbs handlers (ib_uverbs_create_qp / _ex_create_qp / _modify_qp / _destroy_qp, and the ioctl
// methods) all end in these ib_core functions, in the calling process's context, holding the
// `struct ib_qp` they made: hooking them sees every user QP whichever command path created it.
//   kretprobe ib_create_qp_user      -> QPN, device, owner (pid, comm, cgroup id)
//   kprobe    ib_modify_qp_with_udata -> dest QPN (IB_QP_DEST_QPN), dest GID + flow label (IB_QP_AV)
//   kprobe    ib_destroy_qp_user      -> QP gone
// The UDP source port of RoCEv2 derives from the flow label (rdma_flow_label_to_udp_sport): userspace
// computes it, and the flow label itself when the caller left it 0 (rdma_calc_flow_label).
#include <uapi/linux/ptrace.h>
#include <linux/err.h>
#include <rdma/ib_verbs.h>

#define QP_CREATE 1
#define QP_MODIFY 2
#define QP_DESTROY 3
#define DEV_NAME_LEN 64

struct qp_event_t {
    u64 ts_ns;
    u64 cgroup_id;
    u32 pid;  // thread group id (the process)
    u32 qpn;
    u32 dest_qpn;
    u32 flow_label;
    u32 attr_mask;
    u8 kind;
    u8 has_dest_qpn;
    u8 has_av;
    u8 pad;
    u8 dgid[16];
    char comm[TASK_COMM_LEN];
    char dev[DEV_NAME_LEN];
};

BPF_PERF_OUTPUT(qp_events);

static __always_inline void fill_owner(struct qp_event_t *ev, struct ib_qp *qp, u8 kind) {
    struct ib_device *device = NULL;
    ev->ts_ns = bpf_ktime_get_ns();
    ev->cgroup_id = bpf_get_current_cgroup_id();
    ev->pid = bpf_get_current_pid_tgid() >> 32;
    ev->kind = kind;
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    bpf_probe_read_kernel(&ev->qpn, sizeof(ev->qpn), &qp->qp_num);
    bpf_probe_read_kernel(&device, sizeof(device), &qp->device);
    if (device)
        bpf_probe_read_kernel_str(&ev->dev, sizeof(ev->dev), device->name);
}

int qp_create_ret(struct pt_regs *ctx) {
    struct ib_qp *qp = (struct ib_qp *)PT_REGS_RC(ctx);
    if (!qp || IS_ERR_VALUE((unsigned long)qp))
        return 0;
    struct qp_event_t ev = {};
    fill_owner(&ev, qp, QP_CREATE);
    qp_events.perf_submit(ctx, &ev, sizeof(ev));
    return 0;
}

int qp_modify(struct pt_regs *ctx, struct ib_qp *qp, struct ib_qp_attr *attr, int attr_mask) {
    if (!(attr_mask & (IB_QP_DEST_QPN | IB_QP_AV)))
        return 0;
    struct qp_event_t ev = {};
    fill_owner(&ev, qp, QP_MODIFY);
    ev.attr_mask = attr_mask;
    if (attr_mask & IB_QP_DEST_QPN) {
        ev.has_dest_qpn = 1;
        bpf_probe_read_kernel(&ev.dest_qpn, sizeof(ev.dest_qpn), &attr->dest_qp_num);
    }
    if (attr_mask & IB_QP_AV) {
        ev.has_av = 1;
        bpf_probe_read_kernel(&ev.dgid, sizeof(ev.dgid), &attr->ah_attr.grh.dgid.raw);
        bpf_probe_read_kernel(&ev.flow_label, sizeof(ev.flow_label), &attr->ah_attr.grh.flow_label);
    }
    qp_events.perf_submit(ctx, &ev, sizeof(ev));
    return 0;
}

int qp_destroy(struct pt_regs *ctx, struct ib_qp *qp) {
    struct qp_event_t ev = {};
    fill_owner(&ev, qp, QP_DESTROY);
    qp_events.perf_submit(ctx, &ev, sizeof(ev));
    return 0;
}
