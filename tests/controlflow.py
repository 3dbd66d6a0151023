"""Small real ONNX models with control flow, recurrent layers and non-batch inputs, built with
onnx.helper, whose MACs are counted by hand in each docstring (for tests of counts, values, state)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(graph, path, opset=16):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def if_rate_model(path):
    """``x [1, 4]``, ``state [2, 1, 3]`` (first axis not the batch), ``sr`` int64 scalar.
    ``If(sr == 16000)``: then ``x @ W1 [4, 8]`` (32 MACs), else ``x @ W2 [4, 2]`` (8 MACs);
    outputs ``y`` and ``stateN = state + 1`` (carried).
    Hand count: then 1*8*4 = 32, else 1*2*4 = 8; max over branches = 32."""
    w1 = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(4, 8) / 32, "w1")
    w2 = numpy_helper.from_array(np.ones((4, 2), np.float32), "w2")
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    one = numpy_helper.from_array(np.ones((1,), np.float32), "one")
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["y_then"], name="mm_then")], "then", [],
                               [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, [1, 8])])
    else_g = helper.make_graph([helper.make_node("MatMul", ["x", "w2"], ["y_else"], name="mm_else")], "else", [],
                               [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [1, 2])])
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is16k"], name="eq"),
             helper.make_node("If", ["is16k"], ["y"], then_branch=then_g, else_branch=else_g, name="If_rate"),
             helper.make_node("Add", ["state", "one"], ["stateN"], name="carry")]
    g = helper.make_graph(nodes, "if_rate",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "n", 3]),
                           helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None]),
                           helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "n", 3])],
                          [w1, w2, rate, one])
    return _save(g, path)


def _loop_body(cond_from_counter: bool, limit: int):
    """Body: ``h = h @ W [4, 4]`` (16 MACs per iteration); the condition is ``i + 1 < limit``
    (``cond_from_counter``) or handed through."""
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32) * 0.5, "w_body")
    nodes = [helper.make_node("MatMul", ["h_in", "w_body"], ["h_out"], name="body_mm")]
    if cond_from_counter:
        lim = numpy_helper.from_array(np.array(limit, np.int64), "lim")
        step = numpy_helper.from_array(np.array(1, np.int64), "step")
        nodes += [helper.make_node("Add", ["i", "step"], ["i1"], name="inc"),
                  helper.make_node("Less", ["i1", "lim"], ["cond_out"], name="less")]
        inits = [w, lim, step]
    else:
        nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="pass")]
        inits = [w]
    return helper.make_graph(nodes, "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, 4])],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, 4])], inits)


def loop_model(path, trips: int = 5, cond_from_counter: bool = False, m_from_input: bool = False):
    """``x [1, 4]`` through a Loop whose body is ``h @ W [4, 4]`` (16 MACs per iteration), after a
    ``x @ W0 [4, 4]`` (16 MACs). Trip count: the constant ``M = trips`` (condition handed through),
    ``M = 100`` with the condition ``i + 1 < trips`` (the loop ends after ``trips`` iterations), or
    ``M`` from the int64 input ``n`` (decided at run time).
    Hand count for trips = 5: 16 + 16 * 5 = 96 MACs."""
    w0 = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w0")
    true = numpy_helper.from_array(np.array(True), "true")
    inits = [w0, true]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    if m_from_input:
        inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
        m_name = "n"
    else:
        inits.append(numpy_helper.from_array(np.array(100 if cond_from_counter else trips, np.int64), "M"))
        m_name = "M"
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="first_mm"),
             helper.make_node("Loop", [m_name, "true", "h0"], ["h"], body=_loop_body(cond_from_counter, trips),
                              name="the_loop")]
    g = helper.make_graph(nodes, "loop", inputs, [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4])],
                          inits)
    return _save(g, path)


def bilstm_model(path, seq: int = 7, batch: int = 1, inp: int = 5, hidden: int = 3):
    """A bidirectional LSTM, ``X [seq, batch, inp]``, hidden 3.
    Hand count: 2 directions x 7 steps x 1 x (4 x 3 gates) x (5 + 3) = 1344 MACs."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((2, 4 * hidden, inp)).astype(np.float32), "W")
    r = numpy_helper.from_array(rng.standard_normal((2, 4 * hidden, hidden)).astype(np.float32), "R")
    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=hidden, direction="bidirectional",
                            name="bilstm")
    g = helper.make_graph([node], "bilstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, inp])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, 2, batch, hidden])], [w, r])
    return _save(g, path, opset=14)


def loop_data_model(path):
    """A Loop (``M = 10``, body ``h @ W``) that runs only when ``sum(x) > 0``: the data's content
    steers it (``kind: data``), so random data may time another number of iterations."""
    w0 = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w0")
    m = numpy_helper.from_array(np.array(10, np.int64), "M")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["go"], name="positive"),
             helper.make_node("MatMul", ["x", "w0"], ["h0"], name="first_mm"),
             helper.make_node("Loop", ["M", "go", "h0"], ["h"], body=_loop_body(False, 10), name="data_loop")]
    g = helper.make_graph(nodes, "loop_data", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4])], [w0, m, zero])
    return _save(g, path)


def nested_if_model(path):
    """Nested Ifs, the inner one decided by a shape, as torch exports them (silero-vad's pattern).

    Inputs ``x [n, 4]``, ``sr`` int64 scalar. ``If_rate(sr == 16000)``:

    - then: ``h = x @ W1 [4, 8]`` (n*32 MACs), then ``If_batch1(Shape(h)[0] == 1)``:
      then ``Squeeze(h, 0) @ W2 [8, 2]`` (16 MACs), else ``ReduceSum(h @ W3 [8, 6], axis 0)``
      (n*48 MACs); its result is ``y``;
    - else: ``y = ReduceSum(x @ W4 [4, 2], axis 0)`` (n*8 MACs).

    A sibling ``If_gain(sr == 16000)`` gives ``z``: then ``t = x * 2``, else ``t = x * 3``, where
    ``t`` is also the name the inner If's branches use: inlining both must rename one.
    Hand counts: sr=16000, n=1: 32 + 16 = 48; sr=16000, n=3: 96 + 144 = 240; sr=8000: n*8."""
    rng = np.random.default_rng(1)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    zero = numpy_helper.from_array(np.array([0], np.int64), "axis0")
    one = numpy_helper.from_array(np.array(1, np.int64), "one_i")
    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    idx0 = numpy_helper.from_array(np.array(0, np.int64), "idx0")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    three = numpy_helper.from_array(np.array(3.0, np.float32), "three")
    inner_then = helper.make_graph(
        [helper.make_node("Squeeze", ["h", "axis0"], ["t"], name="sq"),
         helper.make_node("MatMul", ["t", "w2"], ["y_one"], name="mm_one")],
        "batch1", [], [helper.make_tensor_value_info("y_one", TensorProto.FLOAT, [None])], [w("w2", 8, 2)])
    inner_else = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w3"], ["t"], name="mm_many"),
         helper.make_node("ReduceSum", ["t", "axis0"], ["y_many"], keepdims=0, name="sum_rows")],
        "batchN", [], [helper.make_tensor_value_info("y_many", TensorProto.FLOAT, [None])], [w("w3", 8, 6)])
    outer_then = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm_in"),
         helper.make_node("Shape", ["h"], ["h_shape"], name="shape_h"),
         helper.make_node("Gather", ["h_shape", "idx0"], ["rows"], axis=0, name="rows"),
         helper.make_node("Equal", ["rows", "one_i"], ["is_one"], name="is_one"),
         helper.make_node("If", ["is_one"], ["y16"], then_branch=inner_then, else_branch=inner_else,
                          name="If_batch1")],
        "rate16k", [], [helper.make_tensor_value_info("y16", TensorProto.FLOAT, [None])], [w("w1", 4, 8)])
    outer_else = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w4"], ["x8"], name="mm_8k"),
         helper.make_node("ReduceSum", ["x8", "axis0"], ["y8"], keepdims=0, name="sum_8k")],
        "rate8k", [], [helper.make_tensor_value_info("y8", TensorProto.FLOAT, [None])], [w("w4", 4, 2)])
    gain_then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"], name="gain2")], "gain2", [],
                                  [helper.make_tensor_value_info("t", TensorProto.FLOAT, [None, 4])])
    gain_else = helper.make_graph([helper.make_node("Mul", ["x", "three"], ["t"], name="gain3")], "gain3", [],
                                  [helper.make_tensor_value_info("t", TensorProto.FLOAT, [None, 4])])
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is16k"], name="eq"),
             helper.make_node("If", ["is16k"], ["y"], then_branch=outer_then, else_branch=outer_else, name="If_rate"),
             helper.make_node("If", ["is16k"], ["z"], then_branch=gain_then, else_branch=gain_else, name="If_gain")]
    g = helper.make_graph(nodes, "nested_if",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                           helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4])],
                          [rate, zero, one, idx0, two, three])
    return _save(g, path)


def loop_with_if_model(path, trips: int = 4):
    """``x [1, 4]`` through a Loop (``M = trips``) whose body holds an If on the outer int64 input
    ``mode``: then ``h @ Wa [4, 4]`` (16 MACs), else ``h @ Wb [4, 4]`` then ``@ Wc [4, 4]`` (32 MACs).
    Hand count, the larger branch each iteration: 32 x 4 = 128 MACs (16 x 4 = 64 on the then branch)."""
    eye = np.eye(4, dtype=np.float32)
    wa, wb, wc = (numpy_helper.from_array(eye * k, n) for k, n in ((0.5, "wa"), (0.25, "wb"), (2.0, "wc")))
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    then_g = helper.make_graph([helper.make_node("MatMul", ["h_in", "wa"], ["h_then"], name="mm_a")], "then", [],
                               [helper.make_tensor_value_info("h_then", TensorProto.FLOAT, [1, 4])])
    else_g = helper.make_graph([helper.make_node("MatMul", ["h_in", "wb"], ["h_b"], name="mm_b"),
                                helper.make_node("MatMul", ["h_b", "wc"], ["h_else"], name="mm_c")], "else", [],
                               [helper.make_tensor_value_info("h_else", TensorProto.FLOAT, [1, 4])])
    body = helper.make_graph(
        [helper.make_node("Equal", ["mode", "zero"], ["pick"], name="is_zero"),
         helper.make_node("If", ["pick"], ["h_out"], then_branch=then_g, else_branch=else_g, name="body_if"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="pass")], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, 4])])
    inits = [wa, wb, wc, zero, numpy_helper.from_array(np.array(trips, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "true")]
    g = helper.make_graph([helper.make_node("Loop", ["M", "true", "x"], ["h"], body=body, name="the_loop")],
                          "loop_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                      helper.make_tensor_value_info("mode", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4])], inits)
    return _save(g, path)


def decoder_loop_model(path, rows: int = 6, hidden: int = 4, classes: int = 3):
    """A greedy decoder as paddle2onnx writes SLANet's: ``x [1, hidden]`` -> ``h0 = x @ W0``, then a
    Loop (``M`` = INT64_MAX, ended by its counter) whose body steps ``h = tanh(h @ Wh)``, picks
    ``ArgMax`` -> ``OneHot``, and writes ``row = onehot + h[:, :classes]`` into row ``i`` of a
    ``[1, rows, classes]`` buffer the paddle2onnx way (``ScatterElements`` over ``Tile(Range(i,
    min(rows, i + 1)))``, its update expanded to ``Shape(Slice(buf, i, ...))``). ``Wh`` and the row
    limit are carried as loop variables passed through unchanged. Outputs: the buffer and the last h."""
    i64 = lambda v, n: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    wh = numpy_helper.from_array((np.arange(hidden * hidden, dtype=np.float32).reshape(hidden, hidden) % 5 - 2) * 0.4,
                                 "wh")
    body_consts = [i64([1], "one"), i64([rows], "rows"), i64([1], "axis1"), i64([1, -1, 1], "col_shape"),
                   i64([1, 1, classes], "reps"), i64([classes], "depth"), i64([0], "zero1"), i64([classes], "ncls"),
                   numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "offon")]
    n = helper.make_node
    body_nodes = [
        n("MatMul", ["h_in", "wh_in"], ["hw"], name="step_mm"),
        n("Tanh", ["hw"], ["h_out"], name="step_tanh"),
        n("ArgMax", ["h_out"], ["pick"], axis=1, keepdims=0, name="pick"),
        n("OneHot", ["pick", "depth", "offon"], ["onehot"], axis=-1, name="onehot"),
        n("Slice", ["h_out", "zero1", "ncls", "axis1"], ["h_head"], name="head"),
        n("Add", ["onehot", "h_head"], ["row"], name="row"),
        n("Add", ["i_in", "one"], ["i_next"], name="inc"),
        n("Min", ["rows", "i_next"], ["stop"], name="stop"),
        n("Slice", ["buf_in", "i_in", "stop", "axis1"], ["the_row"], name="the_row"),
        n("Shape", ["the_row"], ["row_shape"], name="row_shape"),
        n("Unsqueeze", ["row", "axis1"], ["row3"], name="row3"),
        n("Expand", ["row3", "row_shape"], ["update"], name="update"),
        n("Squeeze", ["i_in"], ["start_s"], name="start_s"),
        n("Squeeze", ["stop"], ["stop_s"], name="stop_s"),
        n("Squeeze", ["one"], ["step_s"], name="step_s"),
        n("Range", ["start_s", "stop_s", "step_s"], ["at"], name="at"),
        n("Reshape", ["at", "col_shape"], ["at3"], name="at3"),
        n("Tile", ["at3", "reps"], ["index"], name="index"),
        n("ScatterElements", ["buf_in", "index", "update"], ["buf_out"], axis=1, name="write_row"),
        n("Add", ["limit_in", "one"], ["limit1"], name="limit1"),
        n("Less", ["i_next", "limit1"], ["cond_out"], name="go_on"),
    ]
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        body_nodes, "decoder_body",
        [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, [1]),
         vi("h_in", TensorProto.FLOAT, [1, hidden]), vi("i_in", TensorProto.INT64, [1]),
         vi("buf_in", TensorProto.FLOAT, [1, rows, classes]), vi("limit_in", TensorProto.INT64, [1]),
         vi("wh_in", TensorProto.FLOAT, [hidden, hidden])],
        [vi("cond_out", TensorProto.BOOL, [1]), vi("h_out", TensorProto.FLOAT, [1, hidden]),
         vi("i_next", TensorProto.INT64, [1]), vi("buf_out", TensorProto.FLOAT, [1, rows, classes]),
         vi("limit_in", TensorProto.INT64, [1]), vi("wh_in", TensorProto.FLOAT, [hidden, hidden])], body_consts)
    w0 = numpy_helper.from_array(np.eye(hidden, dtype=np.float32), "w0")
    inits = [w0, wh, i64(2 ** 63 - 1, "M"), numpy_helper.from_array(np.array([True]), "go"), i64([0], "i0"),
             i64([rows - 1], "limit"), numpy_helper.from_array(np.zeros((1, rows, classes), np.float32), "buf0")]
    g = helper.make_graph(
        [n("MatMul", ["x", "w0"], ["h0"], name="first_mm"),
         n("Loop", ["M", "go", "h0", "i0", "buf0", "limit", "wh"], ["h", "i_end", "buf", "limit_end", "wh_end"],
           body=body, name="decoder")],
        "decoder_loop", [vi("x", TensorProto.FLOAT, [1, hidden])],
        [vi("buf", TensorProto.FLOAT, [1, rows, classes]), vi("h", TensorProto.FLOAT, [1, hidden])], inits)
    return _save(g, path, opset=13)


def scan_output_loop_model(path, trips: int = 3):
    """A Loop (``M = trips``) whose body also emits ``h`` as a scan output (stacked per iteration)."""
    body = _loop_body(False, trips)
    body.node.append(helper.make_node("Identity", ["h_out"], ["h_scan"], name="scan"))
    body.output.append(helper.make_tensor_value_info("h_scan", TensorProto.FLOAT, [1, 4]))
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"), numpy_helper.from_array(np.array(True), "true")]
    g = helper.make_graph([helper.make_node("Loop", ["M", "true", "x"], ["h", "hs"], body=body, name="scan_loop")],
                          "scan_loop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("hs", TensorProto.FLOAT, [trips, 1, 4])], inits)
    return _save(g, path)
