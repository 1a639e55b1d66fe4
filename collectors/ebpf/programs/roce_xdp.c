// RoCEv2 packets seen by the kernel on an interface, counted by (dest QP, ECN, BTH opcode) (XDP).
//
// Every frame is passed on untouched (XDP_PASS): this only counts. Handles one 802.1Q/802.1ad tag,
// IPv4 without fragments and IPv6 without extension headers; UDP destination port 4791, then the
// BTH (opcode in byte 0, dest QP in bytes 5-7). The counts live in a per-CPU hash, summed by userspace.
#include <uapi/linux/bpf.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/in.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/ipv6.h>
#include <uapi/linux/udp.h>

#define ROCEV2_PORT 4791
#define BTH_LEN 12

struct roce_key_t {
    u32 ifindex;
    u32 qpn;
    u8 ecn;
    u8 opcode;
    u16 pad;
};

struct vlan_tag_t {
    __be16 tci;
    __be16 proto;
};

BPF_PERCPU_HASH(roce_counts, struct roce_key_t, u64, 65536);

int roce_xdp(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end)
        return XDP_PASS;
    u16 proto = eth->h_proto;
    void *l3 = eth + 1;
    if (proto == htons(ETH_P_8021Q) || proto == htons(ETH_P_8021AD)) {
        struct vlan_tag_t *tag = l3;
        if ((void *)(tag + 1) > end)
            return XDP_PASS;
        proto = tag->proto;
        l3 = tag + 1;
    }
    u8 ecn;
    struct udphdr *udp;
    if (proto == htons(ETH_P_IP)) {
        struct iphdr *ip = l3;
        if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl < 5)
            return XDP_PASS;
        if (ip->frag_off & htons(0x3fff))  // a fragment: no UDP header to read
            return XDP_PASS;
        ecn = ip->tos & 3;
        udp = (void *)ip + ip->ihl * 4;
    } else if (proto == htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = l3;
        if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP)
            return XDP_PASS;
        ecn = (ip6->flow_lbl[0] >> 4) & 3;
        udp = (void *)(ip6 + 1);
    } else {
        return XDP_PASS;
    }
    if ((void *)(udp + 1) > end || udp->dest != htons(ROCEV2_PORT))
        return XDP_PASS;
    u8 *bth = (u8 *)(udp + 1);
    if ((void *)(bth + BTH_LEN) > end)
        return XDP_PASS;
    struct roce_key_t key = {};
    key.ifindex = ctx->ingress_ifindex;
    key.qpn = ((u32)bth[5] << 16) | ((u32)bth[6] << 8) | bth[7];
    key.ecn = ecn;
    key.opcode = bth[0];
    u64 zero = 0;
    u64 *count = roce_counts.lookup_or_try_init(&key, &zero);
    if (count)
        *count += 1;
    return XDP_PASS;
}
