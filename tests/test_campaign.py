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


@pytest.fixture(autouse=True)
def commit_file(tmp_path, monkeypatch):
    """No test reads or writes the machine's commit file, and BOOK_GIT_COMMIT is unset in each and restored after."""
    path = tmp_path / "campaign_commit"
    monkeypatch.setattr(campaign, "COMMIT_FILE", path)
    monkeypatch.setenv("BOOK_GIT_COMMIT", "")          # recorded, so that teardown restores the variable's absence
    monkeypatch.delenv("BOOK_GIT_COMMIT")
    return path


def test_the_first_calls_commit_is_the_one_later_phases_record(commit_file):
    """Phase 1 keeps the commit it was given; a later phase not given one takes it (and hands it to what it saves);
    one given another keeps its own; a phase 1 given none forgets the old one, so git answers."""
    import os
    os.environ["BOOK_GIT_COMMIT"] = "a" * 40
    assert campaign.remember_commit(1, commit_file) == "a" * 40 and commit_file.read_text() == "a" * 40
    del os.environ["BOOK_GIT_COMMIT"]
    assert campaign.remember_commit(2, commit_file) == "a" * 40 and os.environ["BOOK_GIT_COMMIT"] == "a" * 40
    assert results.git_commit() == "a" * 40
    os.environ["BOOK_GIT_COMMIT"] = "b" * 40
    assert campaign.remember_commit(3, commit_file) == "b" * 40
    del os.environ["BOOK_GIT_COMMIT"]
    assert campaign.remember_commit(1, commit_file) is None and not commit_file.exists()
    assert campaign.remember_commit(2, commit_file) is None and "BOOK_GIT_COMMIT" not in os.environ


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


def fake_phase_1(disk, monkeypatch, tests_rc=0):
    """Phase 1 on fake arms that pass step 50 at once (their files written where `arms._start` writes them) and a GPU
    test run that ends at once with exit status `tests_rc`: ([(arm label, GPU) started], [CUDA_VISIBLE_DEVICES of
    each test run])."""
    begun, tests = [], []

    def start(rc, gpu, workdir, probe=None):
        begun.append((rc.label, gpu))
        for ext, text in (("cfg", "{}"), ("log", f"[{rc.label}] step 60 t 9 s grads finite\n"),
                          ("pid", str(campaign.os.getpid()))):
            arms._paths(Path(workdir), rc.label)[ext].write_text(text)

    class Tests:
        def __init__(self, argv, **kw):
            tests.append(kw["env"]["CUDA_VISIBLE_DEVICES"])

        def wait(self):
            return tests_rc

    monkeypatch.setattr(arms, "build_corpus", lambda cfg: (str(disk / "corpus"), {}))
    monkeypatch.setattr(arms, "_start", start)
    monkeypatch.setattr(campaign.subprocess, "Popen", Tests)
    return begun, tests


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


def test_an_entry_saved_by_an_earlier_call_is_not_saved_again(disk, monkeypatch, capsys):
    """Phase 2 saves the entry whose arms finished and marks it on the machine's disk; phase 3 then saves only what
    is left (here nothing) and runs its extras; an entry saved by no earlier call is still saved."""
    calls = []
    monkeypatch.setattr(campaign, "save", lambda name, out, env=None: calls.append(name) or 0)
    cfg = entry(S2)
    for lab in ("fp32:s2", "paper:s2"):
        finished(cfg, lab, 60)
    out = str(disk / "out")
    assert campaign.main(["2", "--out", out, "--entry", S2, "--skip-checks", "--wait", "30"]) == 0
    assert calls == [S2] and campaign.saved_earlier([cfg]) == {S2: 0}
    calls.clear()
    assert campaign.main(["3", "--out", out, "--entry", S2, "--wait", "0", "--extra", "train_step_gpt2"]) == 0
    assert calls == ["train_step_gpt2"]
    assert f"{S2} was saved in an earlier call" in capsys.readouterr().out
    campaign._saved_marker(cfg).unlink()
    calls.clear()
    assert campaign.main(["3", "--out", out, "--entry", S2, "--wait", "0"]) == 0 and calls == [S2]


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


# ------------------------------------------------------------------------------------------ results beside the arms
@pytest.fixture
def beside(disk, monkeypatch):
    """The beside results' directory on the fake machine's disk; starting the scheduler is recorded, not done."""
    d = disk / "machine" / "beside"
    monkeypatch.setattr(campaign, "BESIDE_DIR", d)
    detached = []
    monkeypatch.setattr(campaign, "_detach", lambda argv, log, env=None: detached.append(argv) or 999_999_999)
    return d, detached


def done_beside(name: str, arrays: bool = True) -> None:
    """A beside result that ended on the machine: what `save` wrote, its log and its exit status."""
    d = campaign.BESIDE_DIR
    (d / "full").mkdir(parents=True, exist_ok=True)
    (d / "full" / f"{name}.json").write_text("{}")
    if arrays:
        (d / "full" / f"{name}.npz").write_bytes(b"npz")
    (d / f"{name}_run.log").write_text(f"=== {name} @ full\n")
    (d / f"{name}.pid").write_text("999999999")
    (d / f"{name}.rc").write_text("0")


def plan_beside(gpus, *names) -> None:
    campaign.BESIDE_DIR.mkdir(parents=True, exist_ok=True)
    (campaign.BESIDE_DIR / "plan.json").write_text(json.dumps(dict(gpus=gpus, results=[dict(name=n, gpus=1)
                                                                                        for n in names], skipped={})))


def test_phase_1_plans_beside_results_onto_the_gpus_no_arm_uses(disk, beside, capsys, monkeypatch):
    """Two arms train on GPUs 0 and 1 of four: the proxy results go to GPUs 2 and 3 now and to 0 and 1 once their
    arms finish; a result that wants more GPUs than the machine has is skipped with a line; a finished arm's GPU is
    free."""
    d, detached = beside
    b = entry(S2_FA2)
    started(b, "sdpa:s2", "ours_fa2:s2")
    assert campaign.free_gpus([b], 4) == [2, 3]
    wide = campaign.gpus_needed
    monkeypatch.setattr(campaign, "gpus_needed", lambda name, n: 8 if name == "gpt2_ddp" else wide(name, n))
    assert campaign.start_beside(["headline", "gpt2_ddp", "lr_sweep"], [b], 4) == ["headline", "lr_sweep"]
    plan = json.loads((d / "plan.json").read_text())
    assert plan["gpus"] == [2, 3, 0, 1] and [r["name"] for r in plan["results"]] == ["headline", "lr_sweep"]
    assert plan["after"] == {str(g): [[str(campaign._file(b, lab, "result")), str(campaign._file(b, lab, "pid"))]]
                             for g, lab in ((0, "sdpa:s2"), (1, "ours_fa2:s2"))}
    text = capsys.readouterr().out
    assert "BESIDE SKIPPED: gpt2_ddp needs 8 GPUs, the machine has 4" in text
    assert "beside: headline, lr_sweep on GPU 2, 3 and GPU 0, 1 once their arms finish" in text
    assert detached == [[campaign.sys.executable, "-m", "lib.studies.gpt2.campaign", "beside-run", str(d)]]
    assert (d / "scheduler.pid").read_text() == "999999999"
    finished(b, "sdpa:s2", steps=7)
    assert campaign.free_gpus([b], 4) == [0, 2, 3]
    assert wide("headline", 4) == 1 and wide("gpt2_ddp", 2) == 2


def test_the_scheduler_runs_one_result_a_gpu_at_a_time(beside):
    """Three one-GPU results and one of two GPUs on GPUs 2 and 3: the first two start at once, the third when a GPU
    frees, the two-GPU one when both are idle; each ends with its exit status on the disk."""
    d, _ = beside
    d.mkdir(parents=True)
    (d / "plan.json").write_text(json.dumps(dict(gpus=[2, 3], skipped={}, results=[
        dict(name="a", gpus=1), dict(name="b", gpus=1), dict(name="wide", gpus=2), dict(name="c", gpus=1)])))
    clock, log, procs = [0], [], {}
    length = dict(a=3, b=1, c=2, wide=2)

    class Proc:
        def __init__(self, name):
            self.name, self.end, self.pid = name, clock[0] + length[name], 1000 + len(procs)

        def poll(self):
            return (1 if self.name == "c" else 0) if clock[0] >= self.end else None

    def launch(name, gpus):
        procs[name] = Proc(name)
        log.append((clock[0], name, gpus))
        return procs[name]

    def tick(_):
        clock[0] += 1
        running = [(n, json.loads((d / f"{n}.gpus").read_text())) for n in procs if procs[n].poll() is None]
        gpus = [g for _, gs in running for g in gs]
        assert len(gpus) == len(set(gpus)), f"two results on one GPU at t={clock[0]}: {running}"

    campaign.run_beside(launch=launch, sleep=tick)
    assert log == [(0, "a", [2]), (0, "b", [3]), (1, "c", [3]), (3, "wide", [2, 3])]
    assert {n: (d / f"{n}.rc").read_text() for n in procs} == dict(a="0", b="0", c="1", wide="0")
    # an exit status 0 without the result on the disk is a failure too
    assert [campaign.beside_state(n) for n in ("a", "c")] == ["failed (exit 0)", "failed (exit 1)"]


def test_the_scheduler_takes_an_arms_gpu_once_its_arm_has_finished(beside, tmp_path):
    """GPU 2 is free of arms, GPU 0 has one: the second result waits for GPU 0 until the arm's result is written
    and its process has gone (written at t=1 while the process still runs, gone at t=3), not for GPU 2."""
    d, _ = beside
    d.mkdir(parents=True)
    res, pid = tmp_path / "arm.result", tmp_path / "arm.pid"
    pid.write_text(str(campaign.os.getpid()))        # a live process: this test's own
    (d / "plan.json").write_text(json.dumps(dict(gpus=[2, 0], after={"0": [[str(res), str(pid)]]}, skipped={},
                                                 results=[dict(name="a", gpus=1), dict(name="b", gpus=1)])))
    clock, log = [0], []

    class Proc:
        pid = 1234

        def __init__(self, end):
            self.end = end

        def poll(self):
            return 0 if clock[0] >= self.end else None

    def launch(name, gpus):
        log.append((clock[0], name, gpus))
        return Proc(clock[0] + 9)

    def tick(_):
        clock[0] += 1
        if clock[0] == 1:
            res.write_text("done")
        if clock[0] == 3:
            pid.write_text("999999999")             # no such process

    campaign.run_beside(launch=launch, sleep=tick)
    assert log == [(0, "a", [2]), (3, "b", [0])]


def test_later_phases_return_finished_beside_results_within_eight_files(disk, beside, monkeypatch, capsys):
    """Phase 2 returns the finished beside results into $OUT/full (their logs in one file) while $OUT holds at most
    8 files; of the two left over, phase 3 returns the one that fits beside the entry, the benchmark and the arms
    log it will still write."""
    d, detached = beside

    def save(name, out, env=None):
        (Path(out) / "full").mkdir(exist_ok=True)
        for ext in ("json", "npz"):
            (Path(out) / "full" / f"{name}.{ext}").write_text("{}")
        return 0

    monkeypatch.setattr(campaign, "save", save)
    started(entry(S2_FA2), "sdpa:s2", "ours_fa2:s2")
    names = ["headline", "headline_fix_sm32", "lr_sweep", "beta_sweep", "beta_sweep_seeds"]
    plan_beside([2, 3], *names)
    for n in names:
        done_beside(n)
    out2 = disk / "out" / "p2"
    assert campaign.main(["2", "--out", str(out2), "--entry", S2_FA2, "--skip-checks", "--wait", "0",
                          "--beside", *names]) == 0
    back = sorted(p.name for p in (out2 / "full").iterdir())
    assert back == sorted(f"{n}.{e}" for n in names[:3] for e in ("json", "npz"))
    assert len([p for p in out2.rglob("*") if p.is_file()]) == 8          # arms.log, 3 × (json, npz), the logs
    with campaign.tarfile.open(out2 / campaign.BESIDE_LOGS) as tar:
        assert tar.getnames() == [f"{n}_run.log" for n in names[:3]]
        assert tar.extractfile("lr_sweep_run.log").read() == b"=== lr_sweep @ full\n"
    text = capsys.readouterr().out
    assert "note: beside result beta_sweep is not returned by this call" in text and "beta_sweep_seeds is not" in text
    assert "  beside headline" in text and " done" in text
    out3 = disk / "out" / "p3"
    assert campaign.main(["3", "--out", str(out3), "--entry", S2_FA2, "--beside", *names,
                          "--extra", "train_step_gpt2"]) == 0
    assert sorted(p.name for p in (out3 / "full").iterdir()) == sorted(
        f"{n}.{e}" for n in ("beta_sweep", S2_FA2, "train_step_gpt2") for e in ("json", "npz"))
    assert len([p for p in out3.rglob("*") if p.is_file()]) == 8
    assert "beta_sweep_seeds is not" in capsys.readouterr().out
    assert [campaign.beside_state(n) for n in names] == ["returned"] * 4 + ["done"] and detached == []


def test_a_lost_machine_loses_unfinished_beside_results_and_restarts_nothing(disk, beside, monkeypatch, capsys):
    d, detached = beside
    monkeypatch.setattr(campaign, "save", lambda name, out, env=None: 0)
    started(entry(S2_FA2), "sdpa:s2", "ours_fa2:s2")
    out = str(disk / "out")
    # a bare disk: the beside plan is gone with the machine
    assert campaign.main(["3", "--out", out, "--entry", S2_FA2, "--beside", "headline", "lr_sweep"]) == 3
    text = capsys.readouterr().out
    assert "MACHINE LOST: beside results headline, lr_sweep are not on this disk" in text and detached == []
    # on the same disk: a failed result says so with its log's tail; one whose process ended without an exit
    # status is reported stopped; one phase 1 skipped is named; none is started again
    plan_beside([2, 3], "headline", "lr_sweep")
    plan = json.loads((d / "plan.json").read_text())
    plan["skipped"] = {"gpt2_ddp": "needs 4 GPUs, 2 free of arms"}
    (d / "plan.json").write_text(json.dumps(plan))
    (d / "headline_run.log").write_text("Traceback\nRuntimeError: boom\n")
    (d / "headline.rc").write_text("1")
    (d / "lr_sweep.pid").write_text("999999999")
    assert campaign.main(["2", "--out", out, "--entry", S2_FA2, "--skip-checks", "--wait", "0",
                          "--beside", "headline", "lr_sweep", "gpt2_ddp"]) == 0
    text = capsys.readouterr().out
    assert "beside headline" in text and "failed (exit 1)" in text and "| RuntimeError: boom" in text
    assert "beside lr_sweep" in text and "stopped" in text
    assert "beside: gpt2_ddp is not run: needs 4 GPUs, 2 free of arms" in text
    assert detached == [] and not (Path(out) / campaign.BESIDE_LOGS).exists()


def test_phase_1_starts_beside_results_after_the_smoke_check_and_nothing_without_them(disk, beside, monkeypatch,
                                                                                     capsys):
    """Phase 1 on fake arms that pass step 50 at once and a GPU test run that ends at once: the tests go on the GPUs
    no arm uses; with `--beside` the scheduler starts after the smoke line; without it nothing beside is planned,
    started or written."""
    d, detached = beside
    begun, gpu_tests = fake_phase_1(disk, monkeypatch)
    out = disk / "out"
    assert campaign.main(["1", "--out", str(out), "--entry", S2_FA2, "--wait", "0"]) == 0
    assert begun == [("sdpa:s2", 0), ("ours_fa2:s2", 1)] and gpu_tests == ["2,3"]
    assert detached == [] and not d.exists() and "beside" not in capsys.readouterr().out
    for lab, _ in begun:      # a second phase 1 on the same disk starts no arm again
        campaign._file(entry(S2_FA2), lab, "pid").write_text(str(campaign.os.getpid()))
    monkeypatch.setattr(campaign, "_detach", lambda argv, log, env=None: detached.append(argv) or campaign.os.getpid())
    assert campaign.main(["1", "--out", str(out), "--entry", S2_FA2, "--wait", "0",
                          "--beside", "headline", "beta_sweep_seeds"]) == 0
    text = capsys.readouterr().out
    assert text.index("smoke: every arm past step 50") < text.index("beside: headline, beta_sweep_seeds on GPU 2, 3")
    assert len(detached) == 1 and begun == [("sdpa:s2", 0), ("ours_fa2:s2", 1)] and gpu_tests == ["2,3"] * 2
    assert "  beside headline" in text and "queued" in text


def test_a_running_beside_result_shows_its_slowest_run(beside):
    """The progress column: the last block `run_many` printed, its slowest run."""
    from lib.training.train import progress_lines
    d, _ = beside
    d.mkdir(parents=True)
    blocks = [progress_lines({"paper_s0": (100, 1200, 2.5, 20.0), "fp32_s0": (90, 1200, 2.4, 20.0)},
                             ["paper_s0", "fp32_s0"]),
              progress_lines({"paper_s0": (640, 1200, 1.9, 140.0), "fp32_s0": (600, 1200, 1.8, 140.0)},
                             ["paper_s0", "fp32_s0", "sdpa_s0"])]
    (d / "headline_run.log").write_text("=== headline @ full\n" + "".join(
        f"[run_many] {60 * (i + 1)} s\n" + "\n".join(b) + "\n" for i, b in enumerate(blocks)))
    assert campaign._progress("headline") == "slowest run at step 600 of 1200 (2 runs started)"


def test_phase_1_refuses_arms_our_kernel_runs_only_emulated(disk, monkeypatch, capsys):
    """Every registered GPT-2 arm has a native path (P̄, backward P and dS as BF16 operands or kept in FP32, the dial's
    P̄-and-ℓ-in-FP32 arm included). An arm in a format wider than BF16's mantissa runs only emulated: planted as the
    dial arm at 10 mantissa bits, phase 1 names it, starts no arm and ends the campaign (exit 2)."""
    names = [n for n in registry.entries() if n.startswith("gpt2_") and "arms" in registry.resolve(n, "full")]
    assert "gpt2_dial_pl32_s1" in names and campaign.emulated_arms([entry(n) for n in names]) == []
    wide = "paper/round_block=512/round_p=false/round_l=false/mantissa_bits=10"
    resolve = registry.resolve

    def planted(name, scale, overrides=None, **kw):
        cfg = resolve(name, scale, overrides, **kw)
        if name == "gpt2_dial_pl32_s1":
            cfg = dict(cfg, arms=[dict(a, attn=wide) if a["label"] == "paper_pl32" else a for a in cfg["arms"]])
        return cfg

    monkeypatch.setattr(registry, "resolve", planted)
    assert campaign.main(["1", "--out", str(disk / "out"), "--entry", S2_FA2, "gpt2_dial_pl32_s1"]) == 2
    text = capsys.readouterr().out
    assert "NOT NATIVE" in text and f"gpt2_dial_pl32_s1 paper_pl32: {wide}" in text and "paper_s32" not in text
    assert not any(Path(entry(n)["workdir"]).exists() for n in (S2_FA2, "gpt2_dial_pl32_s1"))


def test_phase_1_on_one_gpu_after_the_suite_ran_alone_starts_no_tests(disk, monkeypatch, capsys):
    """On a one-GPU machine the call runs `make gpu-tests` alone first; phase 1 with `--no-gpu-tests` then starts the
    arm, passes the smoke check and starts no test process (without the flag it would, on the arm's own GPU)."""
    monkeypatch.setattr(campaign.torch.cuda, "device_count", lambda: 1)
    begun, popen = fake_phase_1(disk, monkeypatch)
    out = disk / "out"
    assert campaign.main(["1", "--out", str(out), "--entry", "gpt2_remedy_fix_s1", "--wait", "0",
                          "--no-gpu-tests"]) == 0
    text = capsys.readouterr().out
    assert begun == [("paper_fix_b7_exact:s1", 0)] and popen == []
    assert "smoke: every arm past step 50" in text and "GPU tests" not in text
    assert not (out / "gpu_tests.log").exists()


def test_phase_1_puts_the_gpu_tests_beside_every_arm_but_the_first_on_a_full_machine(disk, monkeypatch):
    """Four arms on four GPUs: no GPU is free, so the tests share the GPUs of every arm but the first."""
    _, seen = fake_phase_1(disk, monkeypatch)
    assert campaign.main(["1", "--out", str(disk / "out"), "--entry", S2, S2_FA2, "--wait", "0"]) == 0
    assert seen == ["1,2,3"]


def test_a_failed_gpu_suite_beside_the_only_arm_ends_the_campaign(disk, monkeypatch, capsys):
    """One GPU, one arm (FP32 attention to the horizon): the suite runs on that GPU beside it; when the suite fails,
    phase 1 stops the arm and exits 2; when it passes, the arm trains on."""
    monkeypatch.setattr(campaign.torch.cuda, "device_count", lambda: 1)
    stopped = []
    monkeypatch.setattr(campaign, "stop_arms", lambda cfgs: stopped.append([c["_entry"] for c in cfgs]))
    begun, gpu_tests = fake_phase_1(disk, monkeypatch, tests_rc=1)
    out = disk / "out"
    assert campaign.main(["1", "--out", str(out), "--entry", "gpt2_arms_s0_fp32", "--wait", "0"]) == 2
    assert begun == [("fp32:s0", 0)] and gpu_tests == ["0"] and stopped == [["gpt2_arms_s0_fp32"]]
    assert "GPU TESTS FAILED: stopping the arms" in capsys.readouterr().out
    shutil.rmtree(disk / "machine")
    begun, gpu_tests = fake_phase_1(disk, monkeypatch, tests_rc=0)
    assert campaign.main(["1", "--out", str(out), "--entry", "gpt2_arms_s0_fp32", "--wait", "0"]) == 0
    assert stopped == [["gpt2_arms_s0_fp32"]] and "FAILED" not in capsys.readouterr().out


def test_select_arms_keeps_the_named_arms_and_marks_partial_entries(disk, capsys):
    inj, low = entry("gpt2_inject_s1"), entry("gpt2_inject_low_s1")
    got = campaign.select_arms([inj, low], ["inject_1x"])
    assert [c["_entry"] for c in got] == ["gpt2_inject_s1"] and campaign._labels(got[0]) == ["inject_1x:s1"]
    assert got[0]["_partial"] and "gpt2_inject_low_s1: none of its arms named by --arms; left out" in capsys.readouterr().out
    both = campaign.select_arms([inj], ["inject_1x", "inject_10x"])
    assert not both[0]["_partial"] and campaign._labels(both[0]) == ["inject_1x:s1", "inject_10x:s1"]
    with pytest.raises(ValueError, match="inject_3x"):
        campaign.select_arms([inj], ["inject_3x"])


def test_an_entry_of_two_arms_trains_one_arm_a_hold_on_one_gpu(disk, monkeypatch, capsys):
    """Hold 1 (`--arms inject_1x`): only that arm starts, phase 3 never saves the partial entry and its finished arm
    comes back in arms_done.tar; kept here, hold 2 (no `--arms`) reuses it, starts only the other arm and saves the
    entry."""
    name = "gpt2_inject_s1"
    monkeypatch.setattr(campaign.torch.cuda, "device_count", lambda: 1)
    calls = []
    monkeypatch.setattr(campaign, "save", lambda n, out, env=None: calls.append(n) or 0)
    begun, _ = fake_phase_1(disk, monkeypatch)
    out = disk / "out"
    assert campaign.main(["1", "--out", str(out), "--entry", name, "--arms", "inject_1x", "--wait", "0",
                          "--no-gpu-tests"]) == 0
    assert begun == [("inject_1x:s1", 0)]
    cfg = entry(name)
    finished(cfg, "inject_1x:s1", steps=9)
    assert campaign.main(["2", "--out", str(out), "--entry", name, "--arms", "inject_1x", "--skip-checks",
                          "--wait", "0"]) == 0
    assert calls == []                                    # phase 2 does not save a partial entry either
    (out / campaign.TAR).unlink()
    assert campaign.main(["3", "--out", str(out), "--entry", name, "--arms", "inject_1x", "--wait", "0"]) == 0
    assert calls == [] and f"{name} not saved: only its arms inject_1x:s1 train here" in capsys.readouterr().out
    kept = disk / "kept"
    campaign.keep(out / campaign.TAR, kept)
    assert sorted(p.name for p in (kept / name).iterdir()) == ["inject_1x_s1.json", "inject_1x_s1.log",
                                                             "inject_1x_s1.result.gz"]
    # hold 2, on a bare machine: the kept arm is reused, only the other one trains
    shutil.rmtree(disk / "machine")
    monkeypatch.setattr(campaign, "KEPT", kept)
    begun.clear()
    assert campaign.main(["1", "--out", str(out), "--entry", name, "--wait", "0", "--no-gpu-tests"]) == 0
    assert begun == [("inject_10x:s1", 0)]
    finished(cfg, "inject_10x:s1", steps=9)
    assert campaign.main(["3", "--out", str(out), "--entry", name, "--wait", "0"]) == 0 and calls == [name]
