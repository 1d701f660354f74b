"""Re-checks for chapter 10 (see autograde/rechecks/__init__.py). The student's kernels run in the sandbox, in
Triton's interpreter, on fresh paged pools whose unused slots are NaN; the probe also compiles them for Hopper
there. The trusted grader's references use torch alone: chapter 9's gather (the course's attnlab.serving) and
torch's scaled_dot_product_attention. The kernels accumulate in float32, so the inputs are float32."""
import torch
import torch.nn.functional as F

from autograde.rechecks import Probe

BLOCK_SIZE = 16


def _pools(g, lens, heads, dims):
    """NaN-filled pools of shuffled blocks holding len_b random tokens per sequence, and their block tables."""
    num_blocks = sum(-(-n // BLOCK_SIZE) for n in lens) + 4
    physical = torch.randperm(num_blocks, generator=g).tolist()
    tables = torch.zeros(len(lens), max(-(-n // BLOCK_SIZE) for n in lens), dtype=torch.int32)
    pools = [torch.full((num_blocks, BLOCK_SIZE, heads, d), float("nan")) for d in dims]
    for b, n in enumerate(lens):
        for i in range(-(-n // BLOCK_SIZE)):
            tables[b, i] = physical.pop()
            used = min(n, (i + 1) * BLOCK_SIZE) - i * BLOCK_SIZE
            for pool in pools:
                pool[tables[b, i], :used] = torch.randn(used, heads, pool.shape[-1], generator=g)
    return pools, tables


def _decode_inputs(g):
    lens = torch.randint(1, 70, (4,), generator=g).tolist()
    (k_pool, v_pool), tables = _pools(g, lens, 2, (32, 32))
    return {"q": torch.randn(4, 8, 32, generator=g), "k_pool": k_pool, "v_pool": v_pool, "block_tables": tables,
            "context_lens": torch.tensor(lens, dtype=torch.int32),
            "far_blocks": torch.randint(1, 100, (2, 16, 1, 64), generator=g, dtype=torch.uint8),
            "far_q": torch.randn(1, 2, 64, generator=g) / 64}


# Both probes write into outputs followed by 16 spare rows, which a kernel that stores its padding rows spoils.
# A pool of one-byte elements whose last block starts past element 2^31, so that block * stride needs int64. Only
# two blocks are written: the rest of the 4 GiB is address space the system never backs with memory. Last, the
# first sequence again from float64 pools, as the notebook's test runs them: what the kernel loads must be widened
# to float32 (as q is) before tl.dot, which refuses operands of two dtypes.
DECODE_CODE = '''
import torch
guarded = torch.full((4, 8 + 16, 32), float("nan"))             # 16 spare rows after the 8 heads: never written
result = [paged_decode(inputs["q"], inputs["k_pool"], inputs["v_pool"], inputs["block_tables"], inputs["context_lens"],
                       out=guarded[:, :8]),
          torch.tensor([float(all(b.cubin_bytes > 0 for b in compile_paged_decode([(4, 16, 64)])))]),
          torch.tensor([float(guarded[:, 8:].isnan().all())])]
buffer = torch.empty(2**32 + 2**21, dtype=torch.uint8)
base = 2**31 + 2**20
num_blocks = (buffer.numel() - base) // (16 * 64)
pool = buffer[base:base + num_blocks * 16 * 64].view(num_blocks, 16, 1, 64)
pool[5], pool[num_blocks - 1] = inputs["far_blocks"][0], inputs["far_blocks"][1]
result.append(paged_decode(inputs["far_q"], pool, pool, torch.tensor([[5, num_blocks - 1]], dtype=torch.int32),
                           torch.tensor([27])))
del buffer, pool
result.append(paged_decode(inputs["q"][:1].double(), inputs["k_pool"].double(), inputs["v_pool"].double(),
                           inputs["block_tables"][:1], inputs["context_lens"][:1]))
'''


def _decode_reference(i):
    from attnlab.serving.paged_kv import paged_attention
    z = paged_attention(i["q"][:, :, None], i["k_pool"], i["v_pool"], i["block_tables"], i["context_lens"])
    far = i["far_blocks"].reshape(32, 1, 64)[:27].float().transpose(0, 1)[None]      # (1, 1, 27, 64)
    far_z = F.scaled_dot_product_attention(i["far_q"][:, :, None], far, far, enable_gqa=True)[:, :, 0]
    return z[:, :, 0], torch.ones(1), torch.ones(1), far_z, z[:1, :, 0]


def _mla_inputs(g):
    lens = torch.randint(1, 50, (3,), generator=g).tolist()
    (c_pool, r_pool), tables = _pools(g, lens, 1, (32, 16))
    return {"q_latent": torch.randn(3, 5, 32, generator=g), "q_rope": torch.randn(3, 5, 16, generator=g),
            "c_kv_pool": c_pool, "k_rope_pool": r_pool, "block_tables": tables,
            "context_lens": torch.tensor(lens, dtype=torch.int32),
            "far_blocks": torch.randint(1, 100, (2, 16, 1, 48), generator=g, dtype=torch.uint8),
            "far_q": torch.randn(1, 3, 48, generator=g) / 64}


MLA_SCALE = 0.17

MLA_CODE = f'''
import torch
guarded = torch.full((3, 5 + 64, 32), float("nan"))          # 64 spare rows: a tile of MLA heads
result = [paged_mla_decode(inputs["q_latent"], inputs["q_rope"], inputs["c_kv_pool"], inputs["k_rope_pool"],
                           inputs["block_tables"], inputs["context_lens"], {MLA_SCALE}, out=guarded[:, :5]),
          torch.tensor([float(all(b.cubin_bytes > 0 for b in compile_paged_mla_decode([(16, 32, 16)])))]),
          torch.tensor([float(guarded[:, 5:].isnan().all())])]
buffer = torch.empty(2**32 + 2**21, dtype=torch.uint8)
base, row = 2**31 + 2**20, 16 * 48
num_blocks = (buffer.numel() - base) // row
pool = buffer[base:base + num_blocks * row].view(num_blocks, 16, 1, 48)
pool[6], pool[num_blocks - 1] = inputs["far_blocks"][0], inputs["far_blocks"][1]
result.append(paged_mla_decode(inputs["far_q"][..., :32], inputs["far_q"][..., 32:], pool[..., :32], pool[..., 32:],
                               torch.tensor([[6, num_blocks - 1]], dtype=torch.int32), torch.tensor([23]), {MLA_SCALE}))
del buffer, pool
'''


def _mla_reference(i):
    from attnlab.serving.paged_kv import gather_paged
    c_kv = gather_paged(i["c_kv_pool"], i["block_tables"], i["context_lens"])      # (B, 1, S, d_c), left-padded
    k_rope = gather_paged(i["k_rope_pool"], i["block_tables"], i["context_lens"])
    s = c_kv.shape[2]
    real = torch.arange(s)[None, :] >= (s - i["context_lens"].long())[:, None]      # (B, S)
    q = torch.cat([i["q_latent"], i["q_rope"]], -1)[:, :, None]                    # (B, H, 1, d_c + d_r)
    z = F.scaled_dot_product_attention(q, torch.cat([c_kv, k_rope], -1), c_kv, attn_mask=real[:, None, None, :],
                                       scale=MLA_SCALE, enable_gqa=True)
    far = i["far_blocks"].reshape(32, 48)[:23].float()[None, None]                   # (1, 1, 23, d_c + d_r)
    far_z = F.scaled_dot_product_attention(i["far_q"][:, :, None], far, far[..., :32], scale=MLA_SCALE,
                                           enable_gqa=True)[:, :, 0]
    return z[:, :, 0], torch.ones(1), torch.ones(1), far_z


def _split_inputs(g):
    lens = torch.randint(1, 150, (4,), generator=g).tolist()
    (k_pool, v_pool), tables = _pools(g, lens, 2, (32, 32))
    spare = int(k_pool.flatten(1).isnan().all(1).nonzero()[0])         # a block no sequence uses: all NaN
    tables = torch.cat([tables, torch.full((4, 2), spare, dtype=torch.int32)], 1)      # a table's unused tail
    return {"q": torch.randn(4, 6, 32, generator=g), "k_pool": k_pool, "v_pool": v_pool, "block_tables": tables,
            "context_lens": torch.tensor(lens, dtype=torch.int32),
            # partial results as splits write them, with log-sum-exps near 1000 and one empty split
            "part_out": torch.randn(1, 2, 5, 32, generator=g),
            "part_lse": torch.cat([torch.rand(1, 2, 4, generator=g) * 50 + 950, torch.full((1, 2, 1), float("-inf"))], -1)}


# Three splits over tiles of two blocks, then eight over half blocks (short sequences leave splits empty), and the
# merge on its own; the outputs are followed by spare rows that a kernel storing its padding rows spoils.
SPLIT_CODE = '''
import torch
guarded = torch.full((4, 6 + 16, 32), float("nan"))
three = paged_decode_split(inputs["q"], inputs["k_pool"], inputs["v_pool"], inputs["block_tables"],
                           inputs["context_lens"], num_splits=3, tile_n=32)
eight = paged_decode_split(inputs["q"], inputs["k_pool"], inputs["v_pool"], inputs["block_tables"],
                           inputs["context_lens"], num_splits=8, tile_n=16, out=guarded[:, :6])
merged = torch.empty(1, 2, 32)
combine_splits(merged, inputs["part_out"].contiguous(), inputs["part_lse"].contiguous())
result = [three, eight, merged, torch.tensor([float(guarded[:, 6:].isnan().all())]),
          torch.tensor([float(all(b.cubin_bytes > 0 for b in compile_paged_decode_split([(3, 16, 32, 4)])))])]
'''


def _split_reference(i):
    from attnlab.serving.paged_kv import paged_attention
    z = paged_attention(i["q"][:, :, None], i["k_pool"], i["v_pool"], i["block_tables"][:, :-2],
                        i["context_lens"])[:, :, 0]
    merged = (torch.softmax(i["part_lse"], -1)[..., None] * i["part_out"]).sum(-2)
    return z, z, merged, torch.ones(1), torch.ones(1)


def _prefill_inputs(g):
    chunks = [(int(torch.randint(0, 40, (1,), generator=g)), int(torch.randint(2, 40, (1,), generator=g)))
              for _ in range(3)]
    lens = [offset + size for offset, size in chunks]
    (k_pool, v_pool), tables = _pools(g, lens, 2, (32, 32))
    # block 0 holds no token (NaN), where a block-table load masked with other=0 points
    k_pool, v_pool = (torch.cat([torch.full_like(pool[:1], float("nan")), pool]) for pool in (k_pool, v_pool))
    tables = tables + 1
    sizes = [size for _, size in chunks]
    return {"q": torch.randn(sum(sizes), 6, 32, generator=g), "k_pool": k_pool, "v_pool": v_pool,
            "block_tables": tables, "query_start": torch.tensor([0] + sizes).cumsum(0),
            "context_lens": torch.tensor(lens, dtype=torch.int32)}


# Every chunk continues after some cached tokens; tiles of 16 queries by 32 keys (two blocks), then 32 by 16; the
# first output is followed by 16 spare rows, which a kernel storing rows past the last chunk spoils.
PREFILL_CODE = '''
import torch
n = inputs["q"].shape[0]
guarded = torch.full((n + 16, 6, 32), float("nan"))
args = (inputs["q"], inputs["k_pool"], inputs["v_pool"], inputs["block_tables"], inputs["query_start"],
        inputs["context_lens"])
result = [paged_prefill(*args, out=guarded[:n], tile_m=16, tile_n=32), paged_prefill(*args, tile_m=32, tile_n=16),
          torch.tensor([float(guarded[n:].isnan().all())]),
          torch.tensor([float(all(b.cubin_bytes > 0 for b in compile_paged_prefill([(3, 16, 32)])))])]
'''


def _prefill_reference(i):
    parts, block_size = [], i["k_pool"].shape[1]
    for c, length in enumerate(i["context_lens"].tolist()):
        first, end = i["query_start"][c].item(), i["query_start"][c + 1].item()
        position = torch.arange(length)
        slots = i["block_tables"][c].long()[position // block_size] * block_size + position % block_size
        k, v = (pool.flatten(0, 1)[slots].transpose(0, 1)[None] for pool in (i["k_pool"], i["v_pool"]))
        causal = position[None, :] <= position[length - (end - first):, None]            # (chunk, keys)
        parts.append(F.scaled_dot_product_attention(i["q"][first:end].transpose(0, 1)[None], k, v, attn_mask=causal,
                                                    enable_gqa=True)[0].transpose(0, 1))
    z = torch.cat(parts)
    return z, z, torch.ones(1), torch.ones(1)


PROBES = {
    "test_paged_decode": Probe(_decode_inputs, DECODE_CODE, _decode_reference, rtol=1e-4, atol=1e-5),
    "test_paged_decode_split": Probe(_split_inputs, SPLIT_CODE, _split_reference, rtol=1e-4, atol=1e-5),
    "test_paged_mla_decode": Probe(_mla_inputs, MLA_CODE, _mla_reference, rtol=1e-4, atol=1e-5),
    "test_paged_prefill": Probe(_prefill_inputs, PREFILL_CODE, _prefill_reference, rtol=1e-4, atol=1e-5),
}
