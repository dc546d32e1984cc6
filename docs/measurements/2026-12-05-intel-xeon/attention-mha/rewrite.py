"""Prototype: each BERT self-attention core -> com.microsoft MultiHeadAttention (key_padding_mask from attention_mask)."""
import sys, onnx, numpy as np
from onnx import helper, numpy_helper, TensorProto
src, dst = sys.argv[1], sys.argv[2]
m = onnx.load(src)
g = m.graph
by_out = {o: n for n in g.node for o in n.output}
consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node if n.op_type == "Constant" and n.attribute and n.attribute[0].type == onnx.AttributeProto.TENSOR}
inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
remove = set()
new_nodes = []
mask_name = "attention_mask_int32"
for L in range(6):
    p = f"/transformer/encoder/layer.{L}/attention/self/"
    names = {n.name: n for n in g.node if n.name.startswith(p)}
    q_in = names[p + "Reshape"].input[0]; k_in = names[p + "Reshape_1"].input[0]; v_in = names[p + "Reshape_2"].input[0]
    scale_node = names[p + "Mul"]; sc = scale_node.input[1]
    scale = float(np.asarray(consts.get(sc, inits.get(sc))).reshape(-1)[0])
    out = names[p + "Reshape_3"].output[0]
    for k in ["Reshape", "Reshape_1", "Reshape_2", "Transpose", "Transpose_1", "Transpose_2", "MatMul", "Mul", "Add", "Softmax", "MatMul_1", "Transpose_3", "Reshape_3"]:
        remove.add(names[p + k].name)
    new_nodes.append(helper.make_node("MultiHeadAttention", [q_in, k_in, v_in, "", mask_name], [out], name=p + "MHA",
                                      domain="com.microsoft", num_heads=12, scale=scale))
    print(L, "scale", scale)
keep = [n for n in g.node if n.name not in remove]
cast = helper.make_node("Cast", ["attention_mask"], [mask_name], to=TensorProto.INT32, name="mask_int32")
del g.node[:]
g.node.extend([cast] + keep + new_nodes)
# topological sort
import collections
produced = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
nodes = list(g.node); order = []
while nodes:
    rest = []
    for n in nodes:
        if all(i in produced for i in n.input):
            order.append(n); produced.update(n.output)
        else: rest.append(n)
    if len(rest) == len(nodes): raise SystemExit(f"cycle/missing: {[ (n.name, [i for i in n.input if i not in produced]) for n in rest[:3]]}")
    nodes = rest
del g.node[:]; g.node.extend(order)
if not any(o.domain == "com.microsoft" for o in m.opset_import):
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
onnx.save(m, dst)
print("saved", dst)
