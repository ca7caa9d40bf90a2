"""The page followed end to end, on the tiny models of tiny.py and local files the test writes: its train lines
(hub ids and /data paths replaced by those) fine-tune a BERT classifier on a jsonl and a Llama through LoRA on a
text corpus; eval scores each checkpoint, the LM's also with lm-eval on the page's local task (a classifier's
refused); and the LM continues infer's prompt= greedily exactly as transformers' own generate does from the
exported weights. Each model's tokenizer files are deleted once it has trained: eval, lm-eval, infer and export read
the run's copy."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch

from helpers import made_once
from lab.config import validate
from lab.errors import UserError
from lab.workflows import evaluate, infer, train

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tiny.py, shared with the in-process tests

import tiny  # noqa: E402

pytestmark = pytest.mark.slow
PAGE = HERE.parents[1] / "README.md"
CLASSIFY = "python scripts/train.py model=hf model.name_or_path=google-bert/bert-base-uncased model.lora.r=8 task=classification data=hf data.data_files=/data/reviews.jsonl data.text_column=text data.label_column=label"  # noqa: E501
CAUSAL = "python scripts/train.py model=hf model.name_or_path=HuggingFaceTB/SmolLM2-135M model.lora.r=16 model.lora.alpha=32 model.lora.dropout=0.05 'model.lora.target_modules=[q_proj,k_proj,v_proj,o_proj]' task=language_model data=hf data.data_files=/data/corpus.jsonl data.text_column=text"  # noqa: E501
EVAL = "python scripts/eval.py ckpt_path=outputs/train/<run>/checkpoints/best.pt eval.split=val"
LM_EVAL = "python scripts/eval.py ckpt_path=outputs/train/<run>/checkpoints/best.pt eval.split=val 'eval.lm_eval.tasks=[my_task]' eval.lm_eval.include_path=/data/tasks eval.lm_eval.num_fewshot=0 eval.lm_eval.limit=4"  # noqa: E501
EXPORT = "python scripts/export.py ckpt_path=outputs/train/<run>/checkpoints/best.pt export.formats=[hf]"
PROMPT = "python scripts/infer.py ckpt_path=outputs/train/<run>/checkpoints/best.pt prompt='the movie' infer.max_new_tokens=20 infer.top_k=1"  # noqa: E501
SMALL = ["trainer.max_epochs=1", "data.batch_size=8", "logger=none"]  # a test-sized run of the page's line


@pytest.fixture(scope="module")
def saved(shared_dir) -> Path:
    def make() -> None:
        tiny.bert_dir(folder / "bert")
        tiny.llama_dir(folder / "llama")

    folder = shared_dir / "hf_model"  # the models test_hf_model_train.py trains
    return made_once(folder, make)


def page_overrides(line: str, places: dict[str, Path]) -> list[str]:
    """The page's command line, checked to be on the page, as overrides with its hub ids and paths made local."""
    assert line in PAGE.read_text(), line
    for name, path in places.items():
        line = line.replace(name, str(path))
    return shlex.split(line)[2:]


def test_the_page_fine_tunes_evaluates_and_infers(saved, compose, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # lm-eval's task reads the local jsonl alone
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = [{"text": text, "label": ["neg", "pos"][label]} for text, label in tiny.sentences(64)]
    for name in ("reviews", "corpus"):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("bert", "llama"):  # copies whose tokenizers can go (the shared ones serve other tests)
        shutil.copytree(saved / name, tmp_path / name)
    places = {
        "google-bert/bert-base-uncased": tmp_path / "bert",
        "HuggingFaceTB/SmolLM2-135M": tmp_path / "llama",
        "/data/": f"{tmp_path}/",
    }
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    classifier = fine_tune(compose, tmp_path / "classify", [*page_overrides(CLASSIFY, places), cache, *SMALL])
    without_tokenizer(tmp_path / "bert")
    best = "outputs/train/<run>/checkpoints/best.pt"
    report = evaluated(compose, page_overrides(EVAL, places | {best: classifier}), tmp_path / "classify-eval")
    assert 0 <= report["metrics"]["acc"] <= 1
    lm_run = [*page_overrides(CAUSAL, places), cache, "data.block_size=24", *SMALL]  # the prompt and 20 new tokens fit
    lm = fine_tune(compose, tmp_path / "lm", lm_run)
    without_tokenizer(tmp_path / "llama")
    places[best] = lm
    report = evaluated(compose, page_overrides(EVAL, places), tmp_path / "lm-eval")
    # eval's sample prompts ("def ", "The "...) are not words of tiny.py's word-level tokenizer: none is spelt
    assert report["samples"] == [] and (tmp_path / "lm-eval" / "samples.txt").is_file()
    scores_the_local_task_as_its_loglikelihoods_say(compose, page_overrides(LM_EVAL, places), tmp_path)
    refused = page_overrides(LM_EVAL, places | {best: classifier})
    with pytest.raises(UserError, match=r"eval\.lm_eval scores a causal language model; .* classification checkpoint"):
        evaluated(compose, refused, tmp_path / "refused")
    assert sorted(p.name for p in (tmp_path / "refused").rglob("*")) == []
    with pytest.raises(UserError, match=r"eval\.lm_eval\.tasks names my_tsak, which lm-eval does not know"):
        misspelt = [o.replace("my_task", "my_tsak") for o in page_overrides(LM_EVAL, places)]
        evaluated(compose, misspelt, tmp_path / "unknown")
    continues_as_transformers_generates(compose, lm, tmp_path)


def without_tokenizer(model: Path) -> None:
    """Delete a model directory's tokenizer files, keeping its config (eval rebuilds the architecture from it).
    transformers would then make a BERT an empty word-piece tokenizer and refuse the Llama: only the run's copy
    tokenizes as the run did."""
    for file in model.glob("tokenizer*"):
        file.unlink()


def fine_tune(compose, run_dir: Path, overrides: list[str]) -> Path:
    cfg = compose(overrides)
    validate(cfg)
    train.run(cfg, run_dir)
    return run_dir / "checkpoints" / "best.pt"


def evaluated(compose, overrides: list[str], run_dir: Path) -> dict:
    evaluate.run(compose([*overrides, "logger=none"], config_name="eval"), run_dir)
    return json.loads((run_dir / "eval.json").read_text())


def scores_the_local_task_as_its_loglikelihoods_say(compose, overrides: list[str], tmp_path: Path) -> None:
    """lm-eval on the page's multiple-choice YAML over a local jsonl, offline: its accuracy is the share of the first
    `limit` rows whose gold word the checkpoint's model finds likelier than the other after the row's text."""
    rows = [(text.rsplit(" ", 1)[0], ["bad", "good"].index(text.rsplit(" ", 1)[1]))
            for text, _ in tiny.sentences(40, seed=1) if text.endswith((" good", " bad"))]  # fmt: skip
    (tmp_path / "my_task.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    (tmp_path / "tasks").mkdir()
    yaml = PAGE.read_text().split("# /data/tasks/my_task.yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "tasks" / "my_task.yaml").write_text(yaml.replace("/data/", f"{tmp_path}/"))
    report = evaluated(compose, overrides, tmp_path / "lm-harness")
    written = json.loads((tmp_path / "lm-harness" / "lm_eval.json").read_text())
    assert written["n-shot"] == {"my_task": 0} and report["lm_eval"] == written["results"]

    from lab.extensions.hf.hub import load_tokenizer
    from lab.workflows import restore

    best = Path(next(o for o in overrides if o.startswith("ckpt_path=")).removeprefix("ckpt_path="))
    restored = restore.rebuild(best)
    model, tokenizer = restored.model, load_tokenizer(restored.meta["tokenizer"])
    right = 0
    for text, label in rows[:4]:
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            last = model(ids)[0, -1].log_softmax(-1)
        choices = [tokenizer.convert_tokens_to_ids(word) for word in ("bad", "good")]
        right += int(last[choices].argmax()) == label
    assert written["results"]["my_task"]["acc,none"] == right / 4


def continues_as_transformers_generates(compose, best: Path, tmp_path: Path) -> None:
    """infer.top_k=1 picks the likeliest token each step: transformers' greedy generate on the page's export."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lab.workflows import export

    overrides = shlex.split(PROMPT.replace("outputs/train/<run>/checkpoints/best.pt", str(best)))[2:]
    infer.run(compose([*overrides, "logger=none"], config_name="infer"), tmp_path / "infer")
    (record,) = json.loads((tmp_path / "infer" / "predictions.json").read_text())["predictions"]
    assert PROMPT in PAGE.read_text() and record["prompt"] == "the movie"

    line = shlex.split(EXPORT.replace("outputs/train/<run>/checkpoints/best.pt", str(best)))[2:]
    export.run(compose([*line, "logger=none"], config_name="export"), tmp_path / "export")
    merged = tmp_path / "export" / "hf"
    tokenizer = AutoTokenizer.from_pretrained(merged)
    model = AutoModelForCausalLM.from_pretrained(merged).eval()
    prompt = tokenizer("the movie", add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():  # eos_token_id=None: continue past an end of sequence, as infer does
        out = model.generate(**prompt, do_sample=False, max_new_tokens=20, eos_token_id=None)
    assert record["text"] == tokenizer.decode(out[0, prompt["input_ids"].shape[1] :])
