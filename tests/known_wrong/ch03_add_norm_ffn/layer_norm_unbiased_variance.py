# cell: layer_norm
# loses: test_layer_norm
# why: torch.var's default divides by d - 1 (annotated-transformer issue 1)
#| export attnlab/norm.py
def layer_norm(x, weight, bias, eps=1e-5):
    if x.shape[-1:] != weight.shape or weight.shape != bias.shape:
        raise ValueError("weight and bias must match the last dimension of x")
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias
