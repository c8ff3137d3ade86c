"""The watch of Inductor's CUDA-graph skips (rapid_llm.models.graph_checks.CudagraphWatch) reads what Inductor
leaves when it skips: its counter and its "skipping cudagraphs due to ..." record. Checked on a CPU by leaving
both as Inductor does (torch._inductor.cudagraph_utils.log_cudagraph_skip_and_bump_counter); the real skips are
tests/gpu/unit/models/test_cudagraphs.py's."""
from __future__ import annotations

from rapid_llm.models.graph_checks import CudagraphWatch


def test_the_watch_sees_a_skip_and_its_reason():
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    with CudagraphWatch(0) as watch:
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to mutated inputs (2 instances). Found from:\n x")
    assert watch.skips == 1 and not watch.formed
    assert watch.reasons == ["skipping cudagraphs due to mutated inputs (2 instances). Found from:"]
    assert "NOT formed: skipping cudagraphs due to mutated inputs (2 instances)" in watch.summary()


def test_the_watch_wants_a_recorded_graph_where_it_can_count_them():
    with CudagraphWatch(0) as watch:
        pass
    assert watch.skips == 0 and watch.reasons == []
    assert watch.graphs in (0, None)  # no CUDA here: the trees recorded nothing
    assert watch.formed is (watch.graphs is None)
    if not watch.formed:
        assert "no graph recorded, no skip while watched" in watch.summary()
