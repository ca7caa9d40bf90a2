"""The DataLoader benchmark: the grid it tries, the setting it recommends, and its run on the regression and
language-model data (digits runs as a subprocess in tests/integration/test_tools.py)."""

from __future__ import annotations

import pytest

from lab.extensions.tools.loader_bench import Row, Setting, default_workers, grid, recommend, recommendation_line, run


def test_the_grid_tries_pinning_only_on_cuda_and_persistence_only_with_workers() -> None:
    cpu = grid([64], [0, 2], cuda=False)
    assert cpu == [Setting(64, 0, False, False), Setting(64, 2, False, False), Setting(64, 2, False, True)]
    cuda = grid([32, 64], [0, 2], cuda=True)
    assert len(cuda) == 2 * (2 + 4) and Setting(64, 2, True, True) in cuda and Setting(32, 0, True, False) in cuda
    assert grid([64], [0], cuda=False, pin_memory=[True]) == [Setting(64, 0, True, False)]


def test_default_workers() -> None:
    assert default_workers(2) == [0, 2]
    assert default_workers(1) == [0, 2]  # a worker beside the main process still shows its cost
    assert default_workers(64) == [0, 2, 4, 8]


def rows(*rates: tuple[Setting, float]) -> list[Row]:
    return [Row(setting, rate, 0.0) for setting, rate in rates]


def test_the_fastest_setting_wins_unless_a_simpler_one_is_within_5_percent() -> None:
    table = rows(
        (Setting(64, 0, False, False), 1000.0),
        (Setting(64, 2, False, False), 1500.0),
        (Setting(64, 2, False, True), 3000.0),
        (Setting(64, 4, False, True), 3100.0),
    )
    assert recommend(table).setting == Setting(64, 2, False, True)  # 4 workers are only 3 % faster
    table[3].samples_per_s = 4000.0
    assert recommend(table).setting == Setting(64, 4, False, True)
    pinned = rows((Setting(64, 2, True, True), 1000.0), (Setting(64, 2, False, True), 990.0))
    assert recommend(pinned).setting.pin_memory is False


def test_the_recommendation_line_names_only_what_matters() -> None:
    best = Row(Setting(128, 2, True, True), 1.0, 0.0)
    assert recommendation_line(best, [128], cuda=False) == (
        "recommended overrides: data.num_workers=2 data.persistent_workers=true"
    )
    assert recommendation_line(best, [64, 128], cuda=True) == (
        "recommended overrides: data.num_workers=2 data.persistent_workers=true data.pin_memory=true "
        "data.batch_size=128"
    )
    assert recommendation_line(Row(Setting(64, 0, False, False), 1.0, 0.0), [64], cuda=False) == (
        "recommended overrides: data.num_workers=0"
    )


DATA = {
    "regression": ["experiment=diabetes_regression"],
    "language_model": ["experiment=char_lm", "data.max_chars=20000"],
}


@pytest.mark.parametrize("overrides", DATA.values(), ids=DATA.keys())
def test_the_benchmark_on_each_task_s_data(compose, overrides: list[str], capsys) -> None:
    cfg = compose([*overrides, "trainer.device=cpu"])
    measured, best = run(cfg, workers=[0, 1], batch_sizes=[8, 16], epochs=1, batches=3)
    assert [row.setting for row in measured] == grid([8, 16], [0, 1], cuda=False)
    assert all(row.samples_per_s > 0 for row in measured) and best in measured
    out = capsys.readouterr().out
    assert "batch_size  num_workers  pin_memory  persistent  samples/s" in out
    assert out.count("<- recommended") == 1
    assert recommendation_line(best, [8, 16], cuda=False) in out
