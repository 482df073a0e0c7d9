/* rdma_proto_wire.c: the RDMA protocol's encodings (control header, CTS elements, connection
 * parameters; all little-endian, byte by byte, so both ends agree whatever their CPUs) and
 * the configuration check. No state, no verbs. */
#include "rdma_proto.h"

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}
static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)get16(p) | ((uint32_t)get16(p + 2) << 16);
}
static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

void gv_rp_ctrl_encode(const struct gv_rp_ctrl *h, void *buf)
{
    uint8_t *p = buf;
    p[0] = h->type;
    p[1] = h->flags;
    put16(p + 2, h->credits);
    put32(p + 4, h->len);
    put32(p + 8, h->msg_len);
    put32(p + 12, h->id);
    put64(p + 16, h->payload_len);
}

void gv_rp_ctrl_decode(const void *buf, struct gv_rp_ctrl *h)
{
    const uint8_t *p = buf;
    h->type = p[0];
    h->flags = p[1];
    h->credits = get16(p + 2);
    h->len = get32(p + 4);
    h->msg_len = get32(p + 8);
    h->id = get32(p + 12);
    h->payload_len = get64(p + 16);
}

void gv_rp_elem_encode(const struct gv_rp_elem *e, void *buf)
{
    uint8_t *p = buf;
    put64(p, e->addr);
    put32(p + 8, e->rkey);
    put32(p + 12, e->flags);
    put64(p + 16, e->len);
}

void gv_rp_elem_decode(const void *buf, struct gv_rp_elem *e)
{
    const uint8_t *p = buf;
    e->addr = get64(p);
    e->rkey = get32(p + 8);
    e->flags = get32(p + 12);
    e->len = get64(p + 16);
}

void gv_rp_params_encode(const struct gv_rp_params *prm, void *buf)
{
    uint8_t *p = buf;
    put32(p, GV_RP_MAGIC);
    put16(p + 4, prm->version);
    put16(p + 6, prm->rx_depth);
    put32(p + 8, prm->slot_size);
    put32(p + 12, 0);
}

gv_status_t gv_rp_params_decode(const void *buf, size_t len, struct gv_rp_params *prm)
{
    const uint8_t *p = buf;
    if (buf == NULL || len < GV_RP_PARAMS_LEN || get32(p) != GV_RP_MAGIC)
        return GV_ERR_PROTO;
    struct gv_rp_params v = {get16(p + 4), get16(p + 6), get32(p + 8)};
    if (v.version != GV_RP_VERSION)
        return GV_ERR_VERSION;
    if (v.rx_depth < 4 || v.rx_depth > GV_RP_MAX_DEPTH || v.slot_size < 256 ||
        v.slot_size > (16u << 20))
        return GV_ERR_PROTO;
    *prm = v;
    return GV_OK;
}

gv_status_t gv_rp_cfg_check(const struct gv_rp_cfg *c)
{
    if (c->slot_size < 256 || c->slot_size > (16u << 20) || c->rx_depth < 4 ||
        c->rx_depth > GV_RP_MAX_DEPTH || c->tx_slots < GV_RP_CTRL_SLOTS + 2 ||
        c->tx_slots > 65536 || c->sq_depth < 8 || c->signal_every < 1 ||
        c->signal_every > c->sq_depth || c->max_write_len < 4096 || c->prefix_len < 1 ||
        c->prefix_len > 64 || c->max_hdr_len < c->prefix_len || c->max_send_queue < 1 ||
        c->max_send_queue > (1u << 20))
        return GV_ERR_INVAL;
    return GV_OK;
}
