"""model=hf through the real scripts, on tiny models and a tokenizer the test writes (tiny.py) and data=hf over
jsonl files the test writes: LoRA classification trained, then evaluated, exported and inferred from its checkpoint
with the original tokenizer gone (the run's copy serves); a causal LM with LoRA killed with SIGKILL and resumed
bitwise with resume=auto; a hub id read from the Hugging Face cache offline, and a missing one refused before
anything is written; each exported by export.formats=[hf]."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from helpers import made_once, plugins_env, run_script, script_env
from warm_python import run_python

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tiny.py, shared with the in-process tests

import tiny  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def saved(shared_dir) -> Path:
    def make() -> None:
        tiny.bert_dir(folder / "bert")
        tiny.llama_dir(folder / "llama")

    folder = shared_dir / "hf_model"
    return made_once(folder, make)


def train(run_dir: Path, *overrides: str, env: dict[str, str] | None = None):
    return run_script("train.py", f"hydra.run.dir={run_dir}", "logger=none", *overrides, env=env)


def reviews(tmp_path: Path, count: int) -> list[str]:
    """data=hf over `count` of tiny.py's sentences in a jsonl file: text, and label neg or pos."""
    rows = "".join(json.dumps({"text": text, "label": ["neg", "pos"][label]}) + "\n" for text, label in
                   tiny.sentences(count))  # fmt: skip
    (tmp_path / "reviews.jsonl").write_text(rows)
    files = f"data.data_files={tmp_path / 'reviews.jsonl'}"
    return ["data=hf", files, "data.text_column=text", "data.batch_size=8", f"data.cache_dir={tmp_path / 'cache'}"]


def test_lora_classification_trains_the_adapter_and_evaluates_from_its_checkpoint(saved, tmp_path):
    bert, tokenizer = saved / "bert", tmp_path / "tok"
    tiny.tokenizer().save_pretrained(tokenizer)
    data = [*reviews(tmp_path, 96), f"data.tokenizer={tokenizer}", "task=classification", "trainer.max_epochs=1"]
    proc = train(tmp_path / "run", "model=hf", f"model.name_or_path={bert}", "model.lora.r=4", *data)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    # eval, export and infer read the run's copy of the tokenizer: the original may move once the run is done
    shutil.move(tokenizer, tmp_path / "moved")
    assert "model.lora: r=4 on query, value: 1,090 of 22,276 parameters train" in output
    assert "parameters: 1,090 trainable, 21,186 frozen" in output  # the start report
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)
    assert any("lora_A" in key for key in ckpt["model"])
    assert ckpt["config"]["model"]["name_or_path"] == str(bert) and ckpt["config"]["model"]["revision"] is None
    evaluated = run_script(
        "eval.py", f"ckpt_path={tmp_path / 'run/checkpoints/best.pt'}", f"hydra.run.dir={tmp_path / 'eval'}",
        "logger=none",
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-4000:]
    assert (tmp_path / "eval" / "eval.json").is_file()
    exported_loads_as_trained(tmp_path / "run" / "checkpoints" / "best.pt", tmp_path)
    infers_lines(tmp_path / "run" / "checkpoints" / "best.pt", tmp_path)


def infers_lines(best: Path, tmp_path: Path) -> None:
    """infer.py on a .txt and a .jsonl file: each line's class probabilities are the trained model's on the line
    tokenized alone (the padding of a shorter line masked out); a .jsonl line without "text" is one line's refusal."""
    import json

    from lab.extensions.hf.hub import load_tokenizer
    from lab.workflows import restore

    texts = ["the movie was very good", "a plot is quite awful", "the film was bad"]
    (tmp_path / "lines.txt").write_text("\n".join(texts) + "\n\n")
    (tmp_path / "lines.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    trained, tokenizer = restore.rebuild(best).model, load_tokenizer(str(tmp_path / "merged"))  # the export's copy
    for name in ("lines.txt", "lines.jsonl"):
        out = tmp_path / f"infer-{name}"
        proc = run_script("infer.py", f"ckpt_path={best}", f"input={tmp_path / name}", "infer.top_k=2",
                          f"hydra.run.dir={out}", "logger=none")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-4000:]
        records = json.loads((out / "predictions.json").read_text())["predictions"]
        assert [r["path"] for r in records] == [f"{tmp_path / name}:{i}" for i in (1, 2, 3)]
        for text, record in zip(texts, records, strict=True):
            with torch.no_grad():
                probs = trained(dict(tokenizer([text], return_tensors="pt"))).softmax(-1)[0]
            by_label = {entry["label"]: entry["prob"] for entry in record["top_k"]}
            assert by_label == pytest.approx({"neg": float(probs[0]), "pos": float(probs[1])}, abs=1e-5)
            assert record["label"] == ["neg", "pos"][int(probs.argmax())]
    (tmp_path / "bad.jsonl").write_text('{"text": "good"}\n{"words": "bad"}\n')
    refused = run_script("infer.py", f"ckpt_path={best}", f"input={tmp_path / 'bad.jsonl'}", "logger=none",
                         f"hydra.run.dir={tmp_path / 'infer-bad'}")  # fmt: skip
    assert refused.returncode == 1 and f'input={tmp_path / "bad.jsonl"}:2 has no "text" string' in refused.stderr


def export(best: Path, out: Path, *overrides: str, env: dict[str, str] | None = None):
    return run_script("export.py", f"ckpt_path={best}", "export.formats=[hf]", f"hydra.run.dir={out}", "logger=none",
                      *overrides, env=env)  # fmt: skip


def exported_loads_as_trained(best: Path, tmp_path: Path) -> None:
    """`export.formats=[hf]`, merged and with export.hf.merge_lora=false: transformers and PEFT load each directory,
    with its tokenizer, into the trained model's logits; an existing directory is refused."""
    from peft import AutoPeftModelForSequenceClassification
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from lab.workflows import restore

    for out, overrides in ((tmp_path / "exp-merged", ()), (tmp_path / "exp-adapter", ("export.hf.merge_lora=false",))):
        proc = export(best, out, *overrides)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "max |logits - checkpoint's|" in proc.stdout + proc.stderr
        shutil.move(out / "hf", tmp_path / out.name.removeprefix("exp-"))
    trained = restore.rebuild(best).model
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "merged")
    inputs = dict(tokenizer(["the movie was very good", "a plot is quite awful"], return_tensors="pt"))
    inputs.pop("token_type_ids", None)
    merged = AutoModelForSequenceClassification.from_pretrained(tmp_path / "merged").eval()
    adapter = AutoPeftModelForSequenceClassification.from_pretrained(tmp_path / "adapter").eval()
    assert merged.config.id2label == {0: "neg", 1: "pos"}
    assert (tmp_path / "adapter" / "adapter_config.json").is_file() and not (
        tmp_path / "adapter/model.safetensors"
    ).exists()
    with torch.no_grad():
        expected = trained(inputs)
        assert torch.allclose(merged(**inputs).logits, expected, atol=1e-5)
        assert torch.allclose(adapter(**inputs).logits, expected, atol=1e-5)


def test_a_causal_lm_with_lora_killed_and_resumed_is_bitwise_the_straight_run(saved, tmp_path):
    llama = saved / "llama"
    recipe = [
        *("model=hf", f"model.name_or_path={llama}", "model.lora.r=2", "model.lora.dropout=0.1"),
        # 134 training rows of 6 tokens (5 words and the end of sequence): 66 blocks, 8 steps an epoch
        *(*reviews(tmp_path, 192), "data.block_size=12", "task=language_model", "task.samples=0"),
        *("trainer.max_epochs=2", "trainer.ckpt_every_n_steps=3"),
    ]
    straight = train(tmp_path / "straight", *recipe)
    assert straight.returncode == 0, straight.stderr[-4000:]
    run_dir = tmp_path / "killed"
    killed = train(run_dir, *recipe, "+callbacks.kill_at_step={step: 13}", env=plugins_env())
    assert killed.returncode == -9, killed.stderr[-4000:]
    resumed = train(run_dir, *recipe, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    ends = [torch.load(d / "checkpoints" / "last.pt", weights_only=True) for d in (tmp_path / "straight", run_dir)]
    assert ends[0]["progress"] == ends[1]["progress"]
    assert ends[0]["model"].keys() == ends[1]["model"].keys()
    for key, value in ends[0]["model"].items():
        assert torch.equal(value, ends[1]["model"][key]), key
    generates_as_trained(run_dir / "checkpoints" / "last.pt", tmp_path)


def generates_as_trained(last: Path, tmp_path: Path) -> None:
    """`export.formats=[hf]` on a LoRA causal LM: plain transformers loads the merged directory and its tokenizer,
    and greedy-generates the tokens the checkpoint's model does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lab.workflows import restore

    proc = export(last, tmp_path / "exp")
    assert proc.returncode == 0, proc.stderr[-4000:]
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "exp" / "hf").eval()
    prompt = AutoTokenizer.from_pretrained(tmp_path / "exp" / "hf")(["the movie was"], return_tensors="pt")["input_ids"]
    trained = restore.rebuild(last).model.network
    settings = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": loaded.config.pad_token_id}
    with torch.no_grad():
        expected = trained.generate(input_ids=prompt, **settings)
        assert torch.equal(loaded.generate(input_ids=prompt, **settings), expected)


def test_a_hub_id_comes_from_the_cache_offline_and_a_missing_one_is_refused_before_writing(saved, tmp_path):
    snapshot = tmp_path / "hf" / "hub" / "models--someone--tiny-bert" / "snapshots" / ("a" * 40)
    shutil.copytree(saved / "bert", snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("a" * 40)
    env = plugins_env() | {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    data = [*reviews(tmp_path, 64), "task=classification", "trainer.max_epochs=1"]  # the model's tokenizer, cached
    proc = train(tmp_path / "cached", "model=hf", "model.name_or_path=someone/tiny-bert", *data, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    from transformers import AutoTokenizer

    words = "the movie was very good"  # the run keeps its own copy of the tokenizer
    assert (
        AutoTokenizer.from_pretrained(tmp_path / "cached" / "tokenizer")(words)["input_ids"]
        == (AutoTokenizer.from_pretrained(saved / "bert")(words)["input_ids"])
    )
    best = tmp_path / "cached" / "checkpoints" / "best.pt"
    no_adapter = export(best, tmp_path / "exp", "export.hf.merge_lora=false", env=env)
    assert no_adapter.returncode == 1 and no_adapter.stderr.strip().splitlines()[-1] == (
        f"error: export.hf.merge_lora=false writes the LoRA adapter alone, and {best} has none (model.lora.r was "
        "null): drop export.hf.merge_lora"
    )
    assert not (tmp_path / "exp" / "hf").exists() and not list(tmp_path.glob("exp/.*.tmp"))
    refused = train(tmp_path / "missing", "model=hf", "model.name_or_path=someone/other", *data, env=env)
    assert refused.returncode != 0
    line = next(line for line in refused.stderr.splitlines() if "someone/other" in line)
    assert f"not in the Hugging Face cache ({tmp_path / 'hf' / 'hub'})" in line
    assert "run `hf download someone/other` on a machine with a network" in line
    assert not (tmp_path / "missing" / "checkpoints").exists() and not (tmp_path / "missing" / "metrics.jsonl").exists()


def test_the_benchmark_races_the_template_against_transformers_trainer_and_lora_against_full(tmp_path):
    """The page's `python -m lab.extensions.hf.bench_hf_finetune`, at its shortest."""
    args = ["--steps", "3", "--batch", "2", "--length", "8", "--hidden", "32", "--vocab", "64"]
    proc = run_python(["-m", "lab.extensions.hf.bench_hf_finetune", *args], cwd=tmp_path, env=script_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| template, full |" in proc.stdout and "| transformers Trainer, full |" in proc.stdout
    assert "template / Trainer: " in proc.stdout
    # a 2-layer Llama of width 32: r=8 (the default) on q_proj and v_proj is 2 layers x 2 x (32 x 8 + 8 x 32) values
    assert "LoRA r=8: 2,048 of " in proc.stdout
