"""The GPT-2 campaign across machines, on fake workdirs (no training): a phase on a bare machine restarts nothing,
finished arms of unsaved entries come back in one file and are kept here, and phase 1 reuses a kept arm only while
its configuration and code fingerprints are the current ones."""
import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

from lib.book import provenance, registry, results
from lib.studies.gpt2 import arms, campaign

S2, S2_FA2 = "gpt2_arms_s2", "gpt2_arms_s2_fa2"      # fp32:s2 + paper:s2, and sdpa:s2 + ours_fa2:s2


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """The registry's entries with their workdirs under tmp_path, a 4-GPU machine, and no arm may start."""
    resolve = registry.resolve

    def here(name, scale, overrides=None, **kw):
        cfg = resolve(name, scale, overrides, **kw)
        return dict(cfg, workdir=str(tmp_path / "machine" / name)) if scale == "full" else cfg

    def no_start(*a, **k):
        raise AssertionError("an arm was started")

    monkeypatch.setattr(registry, "resolve", here)
    monkeypatch.setattr(campaign.torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(campaign.torch.cuda, "get_device_name", lambda i=0: "test GPU")
    monkeypatch.setattr(arms, "_start", no_start)
    monkeypatch.setenv("BOOK_GIT_COMMIT", "c0ffee1234")
    (tmp_path / "out").mkdir()
    return tmp_path


def entry(name: str) -> dict:
    return dict(registry.resolve(name, "full"), _entry=name)


def started(cfg, *labels) -> None:
    """The files `arms._start` leaves for an arm that trains."""
    Path(cfg["workdir"]).mkdir(parents=True, exist_ok=True)
    for lab in labels:
        for ext in ("cfg", "log", "pid"):
            campaign._file(cfg, lab, ext).write_text(f"{lab} {ext}\n")


def finished(cfg, lab: str, steps: int) -> None:
    started(cfg, lab)
    campaign._file(cfg, lab, "log").write_text(f"[{lab}] step {steps} t 9 s grads finite\n")
    torch.save(dict(loss=[3.0] * steps, truncated_at=None, stopped_at=None), campaign._file(cfg, lab, "result"))


def test_phase_3_saves_entries_then_extras_and_phase_2_can_skip_the_checks(disk, monkeypatch):
    calls = []
    monkeypatch.setattr(campaign, "save", lambda name, out, env=None: calls.append((name, (env or {}).get(
        "BOOK_GPT2_CAPTURE"))) or 0)
    started(entry(S2), "fp32:s2", "paper:s2")
    out = str(disk / "out")
    assert campaign.main(["3", "--out", out, "--entry", S2, "--extra", "train_step_gpt2"]) == 0
    assert [c[0] for c in calls] == [S2, "train_step_gpt2"]
    calls.clear()
    assert campaign.main(["2", "--out", out, "--entry", S2, "--skip-checks", "--wait", "0",
                          "--extra", "census_cost"]) == 0
    assert calls == [("census_cost", None)]
    assert (disk / "out" / "arms.log").exists() and not (disk / "out" / campaign.TAR).exists()


def test_phase_2_saves_an_entry_once_all_its_arms_have_finished(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(campaign, "save", lambda name, out, env=None: calls.append(name) or 0)
    a = dict(_entry="a", workdir=str(tmp_path / "a"), seeds=[1], arms=[{"label": "sdpa"}, {"label": "ours_fa2"}])
    b = dict(_entry="b", workdir=str(tmp_path / "b"), seeds=[2], arms=[{"label": "fp32"}])
    for cfg in (a, b):
        Path(cfg["workdir"]).mkdir()
    saved = {}
    campaign._file(a, "sdpa:s1", "result").write_text("{}")
    assert campaign.save_finished([a, b], tmp_path, saved) == [] and calls == []
    campaign._file(a, "ours_fa2:s1", "result").write_text("{}")
    assert campaign.save_finished([a, b], tmp_path, saved) == ["a"] and calls == ["a"] and saved == {"a": 0}
    assert campaign.save_finished([a, b], tmp_path, saved) == [] and calls == ["a"]      # once


def test_a_phase_on_a_bare_machine_restarts_nothing(disk, monkeypatch, capsys):
    """Phase 3 saves the entry whose arms are on the disk and not the one whose machine was lost (saving it would
    start its arms from step 0); phase 2 with only lost entries exits 3 at once. Nothing starts."""
    calls = []
    monkeypatch.setattr(campaign, "save", lambda name, out, env=None: calls.append(name) or 0)
    started(entry(S2), "fp32:s2", "paper:s2")
    out = str(disk / "out")
    assert campaign.main(["3", "--out", out, "--entry", S2, S2_FA2, "--extra", "train_step_gpt2"]) == 3
    assert calls == [S2, "train_step_gpt2"]
    assert f"MACHINE LOST: {S2_FA2} has no arms on this disk; nothing restarted" in capsys.readouterr().out
    calls.clear()
    assert campaign.main(["2", "--out", out, "--entry", S2_FA2, "--wait", "0", "--extra", "census_cost"]) == 3
    assert calls == [] and "MACHINE LOST" in capsys.readouterr().out
    # one arm of two on the disk is a lost entry too
    started(entry(S2_FA2), "sdpa:s2")
    assert campaign.missing_arms(entry(S2_FA2)) == ["ours_fa2:s2"] and campaign.intact([entry(S2_FA2)]) == []


def test_finished_arms_of_unsaved_entries_come_back_in_one_file_and_are_kept(disk, capsys):
    """The paper arm of an entry whose FP32 arm still trains is packed with its log and record; the arms of an entry
    saved in this call are not; `keep` unpacks it outside results/full/ (no result reads it)."""
    a, b = entry(S2), entry(S2_FA2)
    started(a, "fp32:s2")
    finished(a, "paper:s2", steps=7)
    finished(b, "sdpa:s2", steps=7)
    finished(b, "ours_fa2:s2", steps=7)
    assert campaign.pack_finished([a, b], disk / "out", {S2_FA2}) == [f"{S2} paper:s2"]
    kept = disk / "repo" / "results" / "arms"
    assert campaign.main(["keep", str(disk / "out" / campaign.TAR), "--into", str(kept)]) == 0
    assert sorted(p.name for p in kept.rglob("*") if p.is_file()) == ["paper_s2.json", "paper_s2.log",
                                                                      "paper_s2.result.gz"]
    side = json.loads((kept / S2 / "paper_s2.json").read_text())
    assert (side["entry"], side["label"], side["steps"], side["git_commit"]) == (S2, "paper:s2", 7, "c0ffee1234")
    assert side["config"] == registry.resolve(S2, "full")
    assert side["code"] == provenance.code_fingerprint(["lib.studies.gpt2.arms:run"])     # what its result records
    raw = gzip.decompress((kept / S2 / "paper_s2.result.gz").read_bytes())
    assert raw == campaign._file(a, "paper:s2", "result").read_bytes()
    assert (kept / S2 / "paper_s2.log").read_text() == campaign._file(a, "paper:s2", "log").read_text()
    assert results.all_results(kept.parent) == []
    assert "packed into arms_done.tar" in capsys.readouterr().out


def test_an_arm_past_the_size_limit_is_left_out_with_a_note(disk, monkeypatch, capsys):
    a = entry(S2)
    finished(a, "paper:s2", steps=7)
    monkeypatch.setattr(campaign, "TAR_LIMIT", 2048)
    assert campaign.pack_finished([a], disk / "out") == []
    assert not (disk / "out" / campaign.TAR).exists() and "not packed" in capsys.readouterr().out


@pytest.fixture
def kept_paper(disk):
    """The paper arm of gpt2_arms_s2, finished on a machine since lost, kept here."""
    a = entry(S2)
    finished(a, "paper:s2", steps=7)
    campaign.pack_finished([a], disk / "out")
    campaign.keep(disk / "out" / campaign.TAR, disk / "kept")
    shutil.rmtree(a["workdir"])
    return a, disk / "kept"


def test_phase_1_reuses_a_kept_arm_on_equal_configuration_and_code(kept_paper, disk, monkeypatch, capsys):
    a, kept = kept_paper
    assert campaign.seed_kept([a], kept) == [f"{S2} paper:s2"]
    assert "[paper:s2] reused: 7 steps trained at commit c0ffee12 on cpu" in capsys.readouterr().out
    assert arms._paths(Path(a["workdir"]), "paper:s2")["result"].exists()          # what arms.run looks for
    assert "reused" in campaign._file(a, "paper:s2", "log").read_text()
    assert campaign._steps(a, "paper:s2") == (7, True)
    # only the FP32 arm starts, and the capture comes from it (the reused arm has no checkpoint)
    begun = []
    monkeypatch.setattr(arms, "build_corpus", lambda cfg: (str(disk / "corpus"), {}))
    monkeypatch.setattr(arms, "_start", lambda rc, gpu, workdir, probe=None: begun.append(rc.label))
    campaign.start_arms([a], 4)
    assert begun == ["fp32:s2"]
    assert campaign.capture_source([a])[1] == "fp32:s2"
    # not packed again; its entry's save names it
    assert campaign.pack_finished([a], disk / "out" / "again") == []
    campaign.say_reused(a)
    assert f"{S2} saved with paper:s2 reused: 7 steps trained at commit c0ffee12 on cpu" in capsys.readouterr().out


@pytest.mark.parametrize("change, why", [(("code", "lib.studies.gpt2.arms:run", "0" * 64),
                                          "code changed: lib.studies.gpt2.arms:run"),
                                         (("config", "lr", 2e-3), "configuration differs: lr")])
def test_phase_1_refuses_a_kept_arm_trained_under_other_code_or_configuration(kept_paper, capsys, change, why):
    a, kept = kept_paper
    path = kept / S2 / "paper_s2.json"
    side = json.loads(path.read_text())
    side[change[0]][change[1]] = change[2]
    path.write_text(json.dumps(side))
    assert campaign.seed_kept([a], kept) == []
    assert not campaign._file(a, "paper:s2", "result").exists()
    out = capsys.readouterr().out
    assert "paper:s2 of gpt2_arms_s2 (commit c0ffee12) not reused, it trains again" in out and why in out
