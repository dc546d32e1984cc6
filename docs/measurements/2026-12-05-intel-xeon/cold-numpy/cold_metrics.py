"""What the backend did after its own timer in `execute` (cold_setup.py): building and adding one
execution's batch metrics, and the NaN/Inf check of a lone answer."""
import collections

from cold_setup import LONE_TEXT, Served

from serving.backend.batch_execution import execute_batch
from serving.backend.checks import non_finite_answer_errors
from serving.backend.metrics import FAMILIES, batch_observations
from serving.backend.stub_metrics import MetricTotals

served = Served(threads=2)
tok = served.frontend.tokenize([LONE_TEXT]).tensors
answers, stats = execute_batch(lambda feeds: served.session.run(served.outputs, feeds), served.layout, tok)
totals, calls = MetricTotals(FAMILIES), collections.Counter({("wide", "preferred"): 1})
observations = batch_observations(stats, 0.003, 0, served.layout.buckets, calls)
print(len(observations), "observations per execution")
for label, step in [
    ("batch_observations", lambda: batch_observations(stats, 0.003, 0, served.layout.buckets, calls)),
    ("MetricTotals.add", lambda: totals.add(observations)),
    ("both", lambda: totals.add(batch_observations(stats, 0.003, 0, served.layout.buckets, calls))),
    ("non_finite_answer_errors lone", lambda: non_finite_answer_errors(["embedding"], answers)),
]:
    served.cold(label, step, tok[0], calls=1500, warm=True)
