"""benchmarks/bench_llamacpp.py's table without llama.cpp or SmolLM2: the ratios, the goal against its ceiling,
and each row's bandwidth ledger, from sides that report fixed speeds and bytes."""
import pytest

from tiny_models import tiny


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bench_llamacpp")


def test_a_position_holds_every_layers_keys_and_values(bench):
    model = tiny("llama")  # 2 layers, 2 KV heads of 8, fp32
    assert bench.kv_per_position(model) == 2 * 2 * 2 * 8 * 4
    assert bench.kv_per_position(model, 2) == 2 * 2 * 2 * 8 * 2


class Side:
    def __init__(self, name, nbytes):
        self.name, self.nbytes = name, nbytes

    def bytes_per_token(self):
        return self.nbytes


def test_the_table_its_goal_and_ledger(bench, capsys):
    names = {"attnlab fp32": (400, 100), "attnlab int8": (100, 100), "attnlab int8 compiled": (100, 300),
             "attnlab int8 projections alone": (100, 0), "llama.cpp Q8_0": (110, 50)}
    speeds = {"attnlab fp32": [10, 11, 9], "attnlab int8": [20], "attnlab int8 compiled": [30],
              "attnlab int8 projections alone": [35], "llama.cpp Q8_0": [50]}
    sides = [Side(n, b) for n, b in names.items()]
    tokens = {n: [1, 2] for n in names} | {"attnlab int8 projections alone": None, "attnlab int8": [1, 3]}
    figures = {}
    bench.report(figures, sides, speeds, tokens, bandwidth=10_000.0)
    rows = {r["config"]: r for r in figures["rows"]}
    assert rows["attnlab fp32"]["tokens_per_s"] == 10 and rows["attnlab int8"]["x_attnlab_fp32"] == 2
    assert rows["attnlab int8"]["same_tokens_as_fp32"] is False
    assert rows["attnlab int8 projections alone"]["same_tokens_as_fp32"] is None
    # the goal is the faster int8, against Q8_0; the ceiling, the products alone
    assert figures["goal"]["best"] == "attnlab int8 compiled"
    assert figures["goal"]["int8_x_q8_0"] == pytest.approx(0.6) and not figures["goal"]["met"]
    assert figures["goal"]["projections_alone_x_q8_0"] == pytest.approx(0.7) and not figures["goal"]["reachable"]
    # the ledger: bytes a token = weights + KV; yield = tokens/s over bandwidth / bytes
    led = rows["attnlab int8 compiled"]["ledger"]
    assert led["bytes_per_token"] == 400 and led["roofline_tokens_per_s"] == 25 and led["yield"] == pytest.approx(1.2)
    assert rows["llama.cpp Q8_0"]["ledger"]["yield"] == pytest.approx(50 * 160 / 10_000)
    assert "goal >= 0.8x not met" in capsys.readouterr().out
    assert figures["goal"]["paired"]["status"] == "not met"


def test_the_goal_turn_by_turn_holds_only_where_its_interval_decides(bench):
    """Ratios turn by turn; the sign test's interval of their median: extremes for 5 turns (1 - 2/32 of the
    time), the 2nd from each end for 10 (1 - 22/1024), and the goal's status from where that interval lies."""
    slow = [50.0, 80.0, 60.0, 70.0, 40.0]  # the host's drift: both sides slower in the same turns
    got = bench.paired([0.81 * x for x in slow], slow, 0.8)
    assert got["status"] == "met" and got["low"] == pytest.approx(0.81) and got["n"] == 5
    assert got["level"] == pytest.approx(1 - 2 / 32)
    got = bench.paired([0.75, 0.79, 0.83, 0.9, 0.85], [1.0] * 5, 0.8)
    assert (got["low"], got["high"], got["median"], got["status"]) == (0.75, 0.9, 0.83, "unresolved")
    assert bench.paired([0.7, 0.79], [1.0, 1.0], 0.8)["status"] == "not met"
    ten = bench.paired([0.5, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86, 0.87, 0.88, 2.0], [1.0] * 10, 0.8)
    assert (ten["low"], ten["high"], ten["status"]) == (0.81, 0.88, "met")  # one outlier each side does not decide
    assert ten["level"] == pytest.approx(1 - 2 * 11 / 1024)


def test_a_run_with_w8a8_judges_its_goal_apart_from_weight_only_int8s(bench, capsys):
    rows = ("attnlab fp32", "attnlab int8", "attnlab int8 compiled", "attnlab int8 projections alone",
            "attnlab w8a8", "attnlab w8a8 compiled", "attnlab w8a8 projections alone", "llama.cpp Q8_0")
    speeds = dict(zip(rows, ([10.0] * 5, [20.0] * 5, [30.0] * 5, [35.0] * 5, [15.0] * 5, [45.0] * 5, [55.0] * 5,
                             [50.0] * 5)))
    figures = {}
    bench.report(figures, [Side(n, (100, 0)) for n in rows], speeds, {n: None for n in rows}, bandwidth=1e4)
    assert figures["goal"]["best"] == "attnlab int8 compiled" and figures["goal"]["paired"]["status"] == "not met"
    w = figures["goal_w8a8"]
    assert w["best"] == "attnlab w8a8 compiled" and w["int8_x_q8_0"] == pytest.approx(0.9)
    assert w["paired"]["status"] == "met" and w["projections_alone_x_q8_0"] == pytest.approx(1.1)
    assert "nothing but its w8a8 products" in capsys.readouterr().out
