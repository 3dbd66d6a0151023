"""Real detector outputs for the post-processing tests: NudeNet's YOLOv8n (corpus model
``nudenet-320n``, output [1, 4 + 18, 2100], YOLOv8's transposed layout, no objectness) run with
onnxruntime on the corpus photos. None when the corpus is not fetched."""
from __future__ import annotations

from typing import List, Optional

import numpy as np


def nudenet_outputs(n: int = 4) -> Optional[List[np.ndarray]]:
    from sdk import corpus

    if not corpus.is_fetched("nudenet-320n"):
        return None
    import onnxruntime as ort

    sess = ort.InferenceSession(str(corpus.path("nudenet-320n")), providers=["CPUExecutionProvider"])
    return [sess.run(None, feeds)[0][0] for feeds in corpus.sample_inputs("nudenet-320n", n=n)]
