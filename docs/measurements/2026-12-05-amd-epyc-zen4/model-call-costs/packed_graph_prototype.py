"""Prototype: packed-sequence I/O for the served MiniLM graph."""
import collections, onnx
from onnx import helper, TensorProto, numpy_helper
import numpy as np

def packed(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto(); m.CopyFrom(model)
    g = m.graph
    cons = collections.defaultdict(list)
    for n in g.node:
        for i in n.input: cons[i].append(n)
    inits = {i.name: i for i in g.initializer}
    prod = {o: n for n in g.node for o in n.output}
    # 1. position ids: the index tensor of the Gathers on the [max_positions, hidden] table
    pos_idx = None
    for n in g.node:
        if n.op_type == 'Gather' and 'position_embeddings' in n.name:
            pos_idx = n.input[1]
    # 2. the additive attention mask: the tensor every layer's score Add takes besides the scores
    mask = None
    for n in g.node:
        if n.op_type == 'Add' and n.name.endswith('attention/self/Add'):
            mask = n.input[1]; break
    # 3. the token hidden states: the input of the pooling Mul
    pool_mul = next(n for n in g.node if n.name == '/Mul')
    hidden = pool_mul.input[0]
    new = []
    C = lambda name, arr: helper.make_node('Constant', [], [name], value=numpy_helper.from_array(np.asarray(arr), name))
    new += [C('pk_ax13', np.array([1, 3], np.int64)), C('pk_ax12', np.array([1, 2], np.int64)),
            C('pk_zero', np.array(0.0, np.float32)), C('pk_min', np.array(np.finfo(np.float32).min, np.float32)),
            C('pk_flat', np.array([-1], np.int64)), C('pk_flat2', np.array([-1, 384], np.int64)),
            C('pk_one', np.array(1, np.int64)), C('pk_ax0', np.array([0], np.int64)), C('pk_ax1', np.array([1], np.int64)),
            C('pk_eps', np.array(1e-12, np.float32))]
    new += [helper.make_node('Unsqueeze', ['segment_ids', 'pk_ax13'], ['pk_segq']),
            helper.make_node('Unsqueeze', ['segment_ids', 'pk_ax12'], ['pk_segk']),
            helper.make_node('Equal', ['pk_segq', 'pk_segk'], ['pk_same']),
            helper.make_node('Where', ['pk_same', 'pk_zero', 'pk_min'], ['pk_mask'])]
    front = new; new = []
    # pooling: one-hot [S, T] of segments 1..S over the flattened tokens
    new += [helper.make_node('Reshape', ['segment_ids', 'pk_flat'], ['pk_seg_flat']),
            helper.make_node('ReduceMax', ['pk_seg_flat'], ['pk_smax'], keepdims=0),
            helper.make_node('Add', ['pk_smax', 'pk_one'], ['pk_send']),
            helper.make_node('Range', ['pk_one', 'pk_send', 'pk_one'], ['pk_sids']),
            helper.make_node('Unsqueeze', ['pk_sids', 'pk_ax1'], ['pk_sids_col']),
            helper.make_node('Unsqueeze', ['pk_seg_flat', 'pk_ax0'], ['pk_seg_row']),
            helper.make_node('Equal', ['pk_sids_col', 'pk_seg_row'], ['pk_onehot_b']),
            helper.make_node('Cast', ['pk_onehot_b'], ['pk_onehot'], to=TensorProto.FLOAT),
            helper.make_node('ReduceSum', ['pk_onehot', 'pk_ax1'], ['pk_count'], keepdims=1),
            helper.make_node('Reshape', [hidden, 'pk_flat2'], ['pk_hidden_flat']),
            helper.make_node('MatMul', ['pk_onehot', 'pk_hidden_flat'], ['pk_sum']),
            helper.make_node('Div', ['pk_sum', 'pk_count'], ['pk_mean']),
            helper.make_node('ReduceL2', ['pk_mean'], ['pk_norm'], axes=[1], keepdims=1),
            helper.make_node('Clip', ['pk_norm', 'pk_eps', ''], ['pk_norm_c']),
            helper.make_node('Div', ['pk_mean', 'pk_norm_c'], ['embedding_packed'])]
    for n in g.node:
        for k, i in enumerate(n.input):
            if i == pos_idx and 'position_embeddings' in n.name: n.input[k] = 'position_ids'
            if i == mask: n.input[k] = 'pk_mask'
    nodes = front + list(g.node) + new
    del g.node[:]; g.node.extend(nodes)
    _packed_inputs_and_outputs(g)
    onnx.checker.check_model(m)
    return m


def _packed_inputs_and_outputs(g: onnx.GraphProto) -> None:
    """The packed graph's inputs (ids, positions, segments) and one output; what it no longer needs pruned."""
    # inputs/outputs
    old_inputs = {i.name: i for i in g.input}
    del g.input[:]
    g.input.extend([old_inputs['input_ids'],
                    helper.make_tensor_value_info('position_ids', TensorProto.INT64, ['batch', 'sequence']),
                    helper.make_tensor_value_info('segment_ids', TensorProto.INT64, ['batch', 'sequence'])])
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info('embedding_packed', TensorProto.FLOAT, ['texts', 384])])
    # prune nodes not needed for the output
    needed, keep = {'embedding_packed'}, []
    for n in reversed(list(g.node)):
        if any(o in needed for o in n.output):
            keep.append(n); needed.update(i for i in n.input if i)
    del g.node[:]; g.node.extend(reversed(keep))
    used = {i for n in g.node for i in n.input}
    kept_inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]; g.initializer.extend(kept_inits)
    del g.value_info[:]

if __name__ == '__main__':
    import sys
    onnx.save(packed(onnx.load(sys.argv[1])), sys.argv[2])
