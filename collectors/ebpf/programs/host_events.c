// Host drops by reason (skb:kfree_skb) and TCP retransmits by peer (tcp:tcp_retransmit_skb), from
// tracepoints: stable arguments whatever the kernel's struct layouts, so no header/kernel mismatch.
// HAVE_DROP_REASON / HAVE_RETRANSMIT_ERR are set by userspace from the tracepoints' format files.
#include <linux/skbuff.h>
#include <linux/socket.h>

#define MAX_REASONS 512

struct peer_t {
    u8 addr[16];
    u16 family;
    u16 pad;
};

BPF_PERCPU_ARRAY(drops, u64, MAX_REASONS);
BPF_TABLE("lru_hash", struct peer_t, u64, retransmits, 4096);

TRACEPOINT_PROBE(skb, kfree_skb) {
    u32 reason = 0;
#ifdef HAVE_DROP_REASON
    reason = args->reason;
#endif
    if (reason >= MAX_REASONS)
        reason = MAX_REASONS - 1;
    u64 *count = drops.lookup(&reason);
    if (count)
        *count += 1;
    return 0;
}

TRACEPOINT_PROBE(tcp, tcp_retransmit_skb) {
#ifdef HAVE_RETRANSMIT_ERR
    if (args->err)
        return 0;
#endif
    struct peer_t peer = {};
    peer.family = args->family;
    if (args->family == AF_INET)
        __builtin_memcpy(peer.addr, args->daddr, 4);
    else
        __builtin_memcpy(peer.addr, args->daddr_v6, 16);
    u64 zero = 0;
    u64 *count = retransmits.lookup_or_try_init(&peer, &zero);
    if (count)
        __sync_fetch_and_add(count, 1);
    return 0;
}
