"""Regression and language modelling in-process: losses and metrics by hand, token-weighted accumulation, the
table and text datasets, the GPT model, and the task config wiring (monitor, direction, plateau)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from helpers import in_process_trainer
from lab.config import options, validate
from lab.data.datasets import build as build_data
from lab.data.options import CsvConfig, TextConfig
from lab.data.text import IGNORE_INDEX, decode, encode
from lab.errors import ConfigError, UserError
from lab.inference.inputs import Inputs
from lab.models.common import build as build_model
from lab.tasks.base import EvalContext, InferContext
from lab.tasks.common import build as build_task
from lab.tasks.language_model import LanguageModel, TokenMetrics
from lab.tasks.regression import Regression

CPU = torch.device("cpu")


# --------------------------------------------------------------------------- regression
def test_regression_metrics_by_hand_in_the_targets_units():
    task = Regression(target_mean=100.0, target_std=10.0)
    predicted, true = torch.tensor([[0.5], [1.0], [-1.0]]), torch.tensor([0.0, 1.0, -2.0])  # standardised
    assert task.loss(predicted, true).item() == pytest.approx(0.25 + 0 + 1)  # summed squared error
    assert task.weight(true).item() == 3
    metrics = task.metrics(CPU, full=True)
    metrics.update(predicted[:1], true[:1])
    metrics.update(predicted[1:], true[1:])  # two batches: sums accumulate
    scores = metrics.compute()
    assert scores["loss"] == pytest.approx(1.25 / 3)
    assert scores["rmse"] == pytest.approx(math.sqrt(1.25 / 3) * 10)
    assert scores["mae"] == pytest.approx(1.5 / 3 * 10)
    variance = (0 + 1 + 4) / 3 - (-1 / 3) ** 2
    assert scores["r2"] == pytest.approx(1 - (1.25 / 3) / variance)
    assert metrics.predicted_and_true() == ([105.0, 110.0, 90.0], [100.0, 110.0, 80.0])


def test_regression_refuses_class_labels_and_a_wrong_output_width():
    task = Regression()
    with pytest.raises(UserError, match="needs real-valued targets"):
        task.check_first_batch(torch.randn(4, 3), torch.tensor([1, 2, 3, 4]))
    with pytest.raises(UserError, match="one output per target value"):
        task.loss(torch.randn(4, 3), torch.randn(4))


# --------------------------------------------------------------------------- language model
META = {"level": "char", "vocab": list("abc "), "vocab_size": 4, "block_size": 8, "input_shape": [8], "num_outputs": 4}


def test_token_loss_ignores_padding_and_is_fp32_under_low_precision_logits():
    task = LanguageModel(META)
    logits = torch.randn(2, 3, 4, dtype=torch.bfloat16)
    targets = torch.tensor([[1, 2, IGNORE_INDEX], [0, IGNORE_INDEX, IGNORE_INDEX]])
    loss = task.loss(logits, targets)
    flat = logits.float().reshape(-1, 4)
    by_hand = -sum(flat[i].log_softmax(-1)[t] for i, t in [(0, 1), (1, 2), (3, 0)])
    assert loss.dtype == torch.float32 and loss.item() == pytest.approx(float(by_hand), rel=1e-5)
    assert task.weight(targets).item() == 3  # tokens, not sequences
    metrics = TokenMetrics(CPU)
    metrics.update(logits, targets)
    scores = metrics.compute()
    assert scores["loss"] == pytest.approx(float(by_hand) / 3, rel=1e-5)
    assert scores["perplexity"] == pytest.approx(math.exp(scores["loss"]))


def test_a_tokenizers_dict_batch_is_checked_by_its_input_ids_and_gets_no_text_samples(tmp_path: Path):
    meta = {k: v for k, v in META.items() if k not in ("level", "vocab")}  # a tokenizer the core cannot run
    task = LanguageModel(meta)
    ids, labels = torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, IGNORE_INDEX]])
    assert task.check_first_batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, labels).startswith("2 ")
    with pytest.raises(UserError, match="outside the vocabulary of 4"):
        task.check_first_batch({"input_ids": ids + 3, "attention_mask": torch.ones_like(ids)}, labels)
    # without a codec from its data option (DataConfig.text_codec) no text is spelt: no samples, no file
    context = EvalContext(tmp_path, "t", torch.nn.Identity(), CPU, meta, codec=None)
    assert task.write_eval_artifacts(TokenMetrics(CPU), context) == ({}, [])
    prompted = OmegaConf.create({"prompt": "def ", "infer": {"seed": 0}})
    with pytest.raises(UserError, match="no way to encode prompt="):
        task.predict(None, InferContext(prompted, meta, tmp_path, Inputs.read))


def _padded_batches(generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two micro-batches of 2 sequences with 7 and 2 real target tokens: uneven weights."""
    out = []
    for lengths in ((4, 3), (1, 1)):
        x = torch.randint(0, 4, (2, 5), generator=generator)
        y = torch.full((2, 5), IGNORE_INDEX)
        for row, n in enumerate(lengths):
            y[row, :n] = torch.randint(0, 4, (n,), generator=generator)
        out.append((x, y))
    return out


def test_accumulation_over_uneven_token_counts_equals_the_large_batch(compose, tmp_path: Path):
    """Two micro-batches (7 and 2 tokens) accumulated = one batch of both: the loss is weighted by tokens over
    the whole group, not averaged per micro-batch (which would weigh the 2 tokens like the 7)."""
    micro = _padded_batches(torch.Generator().manual_seed(0))
    cfg = compose(["optimizer=sgd", "optimizer.momentum=0", "optimizer.nesterov=false", "optimizer.weight_decay=0"])
    results = []
    for group in (micro, [tuple(torch.cat(parts) for parts in zip(*micro))]):
        torch.manual_seed(0)
        model = build_model(
            OmegaConf.create({"name": "gpt", "n_layer": 1, "n_head": 2, "n_embd": 8, "dropout": 0.0}), META
        )
        trainer = in_process_trainer(cfg, model, LanguageModel(META), [group], tmp_path, total_steps=1)
        trainer.train_step(group)
        trainer.tracker.finish()
        results.append({k: v.clone() for k, v in model.state_dict().items()})
    for key, value in results[0].items():
        torch.testing.assert_close(value, results[1][key], rtol=0, atol=1e-6, msg=key)


def test_gpt_is_causal_and_takes_any_length_up_to_its_block():
    torch.manual_seed(0)
    model = build_model(
        OmegaConf.create({"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 16, "dropout": 0.0}), META
    )
    model.eval()
    x = torch.randint(0, 4, (2, 8))
    changed = x.clone()
    changed[:, 5] = (x[:, 5] + 1) % 4
    a, b = model(x), model(changed)
    assert a.shape == (2, 8, 4)
    torch.testing.assert_close(a[:, :5], b[:, :5])  # positions before 5 never see it
    assert not torch.allclose(a[:, 5:], b[:, 5:])
    torch.testing.assert_close(model(x[:, :3]), a[:, :3])
    with pytest.raises(ConfigError, match="token sequences"):
        build_model(OmegaConf.create({"name": "gpt"}), {"input_shape": [10], "num_outputs": 1})


def test_text_vocabulary_round_trip_and_unknown_characters(tmp_path: Path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world, " * 200)
    module = build_data(OmegaConf.structured(TextConfig(path=str(corpus), block_size=16)))
    meta = module.meta
    assert meta["vocab"] == sorted(set("hello world, ")) and meta["input_shape"] == [16]
    x, y = module.train[0]
    assert x.dtype == torch.int64 and x.shape == (16,) and torch.equal(x[1:], y[:-1])  # y is x shifted by one
    assert decode(encode("hello", meta), meta) == "hello"
    with pytest.raises(UserError, match="never saw"):
        encode("hello!", meta)
    byte_level = build_data(OmegaConf.structured(TextConfig(path=str(corpus), level="byte")))
    assert byte_level.meta["vocab_size"] == 256 and decode(encode("é", byte_level.meta), byte_level.meta) == "é"


def test_text_that_is_not_valid_in_its_encoding_is_counted_in_a_warning_not_replaced_silently(tmp_path, caplog):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("café crème, ".encode("latin-1") * 100)  # 200 bytes that are not UTF-8
    module = build_data(OmegaConf.structured(TextConfig(path=str(corpus), block_size=16)))
    assert "\ufffd" in module.meta["vocab"]  # read as before, U+FFFD for each of them
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == (
        f"{corpus}: 200 bytes are not valid utf-8 and were read as U+FFFD; give the file's encoding with "
        "data.encoding=<name> (e.g. latin-1)"
    )
    caplog.clear()
    right = build_data(OmegaConf.structured(TextConfig(path=str(corpus), block_size=16, encoding="latin-1")))
    assert "é" in right.meta["vocab"] and "\ufffd" not in right.meta["vocab"] and not caplog.records
    with pytest.raises(ConfigError, match=r"^data.encoding='latin-9x' is not a text encoding Python knows"):
        validate(OmegaConf.structured(TextConfig(path=str(corpus), encoding="latin-9x")))


def test_a_csv_that_is_not_valid_in_its_encoding_is_read_with_a_warning(tmp_path, caplog):
    table = tmp_path / "table.csv"
    table.write_bytes(("x,label\n" + "".join(f"{i},{'é' if i % 2 else 'e'}\n" for i in range(40))).encode("latin-1"))
    module = build_data(OmegaConf.structured(CsvConfig(path=str(table), target="label", target_type="class")))
    assert module.meta["class_names"] == ["e", "\ufffd"]
    assert "20 bytes are not valid utf-8 and were read as U+FFFD" in caplog.text
    right = CsvConfig(path=str(table), target="label", target_type="class", encoding="latin-1")
    assert build_data(OmegaConf.structured(right)).meta["class_names"] == ["e", "é"]


def test_builtin_corpus_is_python_source_and_deterministic():
    first = build_data(OmegaConf.structured(TextConfig(max_chars=5000)))
    second = build_data(OmegaConf.structured(TextConfig(max_chars=5000)))
    assert torch.equal(first.train.ids, second.train.ids)
    assert "def " in decode(first.train.ids.tolist(), first.meta)


# --------------------------------------------------------------------------- csv tables
def _csv(tmp_path: Path, text: str) -> str:
    path = tmp_path / "table.csv"
    path.write_text(text)
    return str(path)


def test_csv_reads_features_and_a_class_or_value_target(tmp_path: Path):
    rows = "".join(f"{i},{i % 3},{'cat' if i % 2 else 'dog'},{2.5 * i}\n" for i in range(40))
    path = _csv(tmp_path, "x1,x2,label,price\n" + rows)
    classes = build_data(
        OmegaConf.structured(CsvConfig(path=path, target="label", features=["x1", "x2"], target_type="class"))
    )
    assert classes.meta["class_names"] == ["cat", "dog"] and classes.meta["input_shape"] == [2]
    values = build_data(
        OmegaConf.structured(CsvConfig(path=path, target="price", features=["x1", "x2"], target_type="value"))
    )
    assert values.meta["num_outputs"] == 1 and values.meta["target_mean"] > 0
    features = torch.stack([x for x, _ in values.train])
    assert features.mean(0).abs().max() < 1e-5  # standardised with the train split's statistics


@pytest.mark.parametrize(
    ("text", "target", "message"),
    [
        ("a,b\n1,2\n3,4\n", "c", "data.target='c' is not a column"),
        ("a,b\n1,2\nx,4\n" + "1,2\n" * 10, "b", "line 3, column 'a': 'x' is not a number"),
        ("a,b\n1,2\n3\n", "b", "line 3 has 1 fields"),
        ("a,b\n", "b", "no data rows"),
        # the first `a` would be read twice and the second never: one name per column
        ("a,b,a,y\n" + "1,2,3,4\n" * 12, "y", r"table.csv: the header names column\(s\) 'a' more than once"),
        ("a,b,a,b,y\n" + "1,2,3,4,5\n" * 12, "y", r"column\(s\) 'a', 'b' more than once"),
        # the one column that holds them is named, not every column read with it
        (
            "a,b,c,y\n" + "1,2,3,4\n" * 5 + "1,nan,3,4\n" + "1,inf,3,4\n",
            "y",
            r"table.csv: column 'b' holds NaN or inf \(2 rows, the first line 7: 'nan'\); fill or drop those rows$",
        ),
        ("a,y\n" + "1,4\n" * 5 + "1,NaN\n", "y", r"column 'y' holds NaN or inf \(1 row, the first line 7: 'NaN'\)"),
    ],
)
def test_csv_mistakes_name_the_problem(tmp_path: Path, text: str, target: str, message: str):
    with pytest.raises(ConfigError, match=message):
        build_data(OmegaConf.structured(CsvConfig(path=_csv(tmp_path, text), target=target, target_type="value")))


def test_a_class_target_of_non_integer_numbers_is_refused_naming_task_regression(tmp_path: Path):
    """600 distinct measurements would otherwise become 600 classes, and accuracy stay near 0."""
    generator = random.Random(0)
    rows = "".join(f"{x:.4f},{2 * x + generator.gauss(0, 0.1):.6f}\n" for x in (generator.random() for _ in range(600)))
    path = _csv(tmp_path, "x,y\n" + rows)
    with pytest.raises(
        ConfigError,
        match=r"data.target='y' in .*table.csv holds non-integer numbers .*600 distinct "
        r"values in 600 rows.*use task=regression",
    ) as refused:
        build_data(OmegaConf.structured(CsvConfig(path=path, target="y", target_type="class")))
    assert "\n" not in str(refused.value)
    values = build_data(OmegaConf.structured(CsvConfig(path=path, target="y", target_type="value")))
    assert values.meta["num_outputs"] == 1  # the task the message names reads the column


@pytest.mark.parametrize(
    ("labels", "classes"),
    [
        (["1.0", "2.0", "10.0"], ["1.0", "2.0", "10.0"]),  # integers written as floats
        (["0", "1", "2"], ["0", "1", "2"]),
        (["b", "a", "2.5"], ["2.5", "a", "b"]),  # names: a number among them is one more name
    ],
)
def test_integer_valued_and_named_class_labels_stay_labels(tmp_path: Path, labels: list[str], classes: list[str]):
    rows = "".join(f"{i},{labels[i % 3]}\n" for i in range(30))
    path = _csv(tmp_path, "x,y\n" + rows)
    built = build_data(OmegaConf.structured(CsvConfig(path=path, target="y", target_type="class")))
    assert built.meta["class_names"] == classes


# --------------------------------------------------------------------------- config wiring
@pytest.mark.parametrize(
    ("task", "monitor", "mode", "direction"),
    [
        ("classification", "acc", "max", "maximize"),
        ("regression", "rmse", "min", "minimize"),
        ("language_model", "loss", "min", "minimize"),
    ],
)
def test_best_checkpoint_plateau_and_sweeps_follow_the_task_monitor(compose, task, monitor, mode, direction):
    cfg = compose([f"task={task}", "scheduler=plateau"])
    assert cfg.optimized_metric == f"val/{monitor}_best" and cfg.sweep.direction == direction
    assert cfg.scheduler.monitor == f"val/{monitor}" and cfg.scheduler.mode == mode


@pytest.mark.parametrize(
    ("overrides", "typo", "choices"),
    [
        (["task.metrics=[f1]"], "accuracy", "loss, acc, acc_top5, f1"),
        (["experiment=diabetes_regression"], "RMSE", "loss, rmse, mae, r2"),
        (["experiment=char_lm"], "ppl", "loss, perplexity, token_acc"),
    ],
)
def test_a_monitor_that_names_no_metric_is_refused_before_training(compose, overrides, typo, choices):
    cfg = compose([*overrides, f"task.monitor={typo}"])
    with pytest.raises(ConfigError) as refused:
        validate(cfg)
    task = cfg.task.name
    assert str(refused.value) == (
        f"task.monitor={typo!r} is not a validation metric of task={task}; choose one of {choices}"
    )


@pytest.mark.parametrize(
    ("keys", "meta", "outputs", "targets"),
    [
        (
            {"name": "classification", "metrics": ["f1", "auroc"]},
            {"num_classes": 3},
            torch.randn(4, 3),
            torch.arange(4) % 3,
        ),
        ({"name": "regression"}, {}, torch.randn(4, 1), torch.randn(4)),
        ({"name": "language_model"}, META, torch.randn(2, 3, 4), torch.randint(0, 4, (2, 3))),
    ],
)
def test_the_metric_names_a_task_option_declares_are_those_its_validation_reports(keys, meta, outputs, targets):
    """The names that refuse a wrong task.monitor before training are exactly what the task computes."""
    declared = options.instantiate("task", OmegaConf.create(keys)).metric_names()
    metrics = build_task(OmegaConf.create(keys), meta).metrics(CPU)
    metrics.update(outputs, targets)
    assert declared == tuple(metrics.compute())


def test_every_shipped_experiment_is_valid(compose):
    for name in ("diabetes_regression", "char_lm"):
        validate(compose([f"experiment={name}"]))


def test_an_unknown_task_dataset_or_model_name_suggests_the_nearest():
    with pytest.raises(ConfigError, match=r"task=regresion is not an option of task; did you mean 'regression'"):
        build_task(OmegaConf.create({"name": "regresion"}), {})
    with pytest.raises(ConfigError, match=r"data=imagenet is not an option of data; .*choose one of .*digits"):
        build_data(OmegaConf.create({"name": "imagenet"}))


def test_gpt_gradient_checkpointing_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        cfg = {
            "name": "gpt",
            "n_layer": 2,
            "n_head": 2,
            "n_embd": 16,
            "dropout": 0.0,
            "grad_checkpointing": checkpointing,
        }
        model = build_model(OmegaConf.create(cfg), META).train()
        model(torch.randint(0, 4, (2, 8))).square().mean().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, msg=name)


def test_dict_batches_split_move_and_slice():
    from lab.data import batches

    batch = {"tokens": torch.arange(6).view(3, 2), "mask": torch.ones(3, 2), "targets": torch.tensor([1, 2, 3])}
    inputs, targets = batches.split(batch)
    assert set(inputs) == {"tokens", "mask"} and torch.equal(targets, batch["targets"])
    moved = batches.to_device((inputs, targets), CPU)
    assert batches.size(moved[0]) == 3 and torch.equal(batches.head(moved[0], 2)["tokens"], batch["tokens"][:2])
    single, _ = batches.split({"inputs": torch.zeros(2, 3), "labels": torch.zeros(2)})
    assert isinstance(single, torch.Tensor)  # one input left: the tensor itself
    with pytest.raises(ValueError, match="targets"):
        batches.split({"x": torch.zeros(1)})
