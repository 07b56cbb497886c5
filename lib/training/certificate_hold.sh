#!/usr/bin/env bash
# One hold of the loop certificate after a change the training children reach, as calls back to back on one GPU:
#   bash lib/training/certificate_hold.sh PHASE      (env: OUT, BOOK_GIT_COMMIT; END = seconds this call may use, default 560)
# (after `python -m lib.training.loop_certificate prepare --trees .lc_trees` here, `.lc_trees` named in the call's carry)
# phase 1 starts `make gpu-tests` beside the proxy half, or the GPT-2 half's start once the proxy's result is fresh
# (eager, deterministic: sharing the GPU changes no bit); a half whose committed result is fresh is not run; the
# timing benchmarks run only once the GPU is otherwise idle; the GPT-2 half takes what time is left (it resumes from
# the machine's disk in the next call). Every finished result goes to $OUT/results.tgz (≤ 8 files come back).
set -u
P=$1; END=${END:-560}; T0=$(date +%s)
left() { echo $(( END - ($(date +%s) - T0) )); }
R=/tmp/hold_res; mkdir -p $R "$OUT"
log() { echo "[$(date -u +%T) +$(( $(date +%s) - T0 ))s] $*" | tee -a /tmp/hold.log; }
run() { local n=$1; shift; log "$n start (left $(left) s) $*"; echo "==== phase $P: $n $* ($(date -u +%T))" >> /tmp/runs.log
        python3 -m lib.experiments "$n" --scale full --out $R "$@" >> /tmp/runs.log 2>&1; local rc=$?; log "$n rc=$rc"; return $rc; }
# the committed results that are stale here, told once per call (≈ 7 s an import): a benchmark or certificate half
# that is fresh is not run again; when staleness cannot be told, every one counts as stale and runs
ALL="loop_certificate_proxy loop_certificate_gpt2 capture_overhead_bench train_step_bench train_step_fix train_step_qknorm
     train_step_remedies train_step_gpt2 census_cost monitor_overhead"
STALE=$(python3 -c "import sys, lib.book.setup; from lib.book import results as r
print(*[n for n in sys.argv[1:] if r.staleness(r.load(n, 'full').meta)])" $ALL 2>/dev/null) || STALE="$ALL"
stale() { [[ " $(echo $STALE) " == *" $1 "* ]]; }
n_left() { python3 -c "import json,sys;print(json.load(open('$R/full/$1.json'))['data']['n_left'])" 2>/dev/null || echo 99; }
# a certificate half to run: stale, or fresh but committed part-done (its combinations left; the done ones carry over)
todo() { stale $1 || [ "$(python3 -c "import json;print(json.load(open('results/full/$1.json'))['data'].get('n_left', 0))" \
                         2>/dev/null || echo 0)" != 0 ]; }
log "phase $P on $(nvidia-smi --query-gpu=name --format=csv,noheader) commit ${BOOK_GIT_COMMIT:-?}"
# A combination carries over only on the GPU model it was certified on, so each model keeps its own record of the
# GPT-2 half's part-done combinations: on an H200 the certificate resumes from the H200's (the committed carry file
# holds the H100's), and whichever model completes all of them gives the committed result.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) [ -f results/loop_certificate_gpt2_carry_h200.json ] &&
          cp results/loop_certificate_gpt2_carry_h200.json results/loop_certificate_gpt2_carry.json
          log "H200: the GPT-2 half carries from the H200's record" ;;
esac
SUITE=
if [ "$P" = 1 ]; then
  ( OUT=/tmp/suite make gpu-tests > /tmp/suite_run.log 2>&1; echo $? > /tmp/suite.rc ) & SUITE=$!
fi
# beside the suite: the proxy half, or once its committed result is fresh, the first ≈ 300 s of the GPT-2 half (the
# suite's time; the idle GPU is kept for the benchmarks, and the GPT-2 half resumes after them)
if todo loop_certificate_proxy && [ "$(n_left loop_certificate_proxy)" != 0 ] && [ "$(left)" -gt 240 ]; then
  run loop_certificate_proxy --set max_s=$(( $(left) - 200 )); log "proxy left: $(n_left loop_certificate_proxy)"
elif [ -n "$SUITE" ] && todo loop_certificate_gpt2 && [ "$(left)" -gt 500 ]; then
  # with no benchmark stale the idle GPU is not needed after the suite: the GPT-2 half takes the whole call
  BENCH_STALE=$(for n in $STALE; do case $n in loop_certificate_*) ;; *) echo $n;; esac; done)
  run loop_certificate_gpt2 --set max_s=$([ -n "$BENCH_STALE" ] && echo 300 || echo $(( $(left) - 230 )))
  log "gpt2 left: $(n_left loop_certificate_gpt2)"
fi
if [ -n "$SUITE" ]; then wait $SUITE; log "gpu-tests rc=$(cat /tmp/suite.rc)"; tail -5 /tmp/suite_run.log | tee -a /tmp/hold.log
  cp /tmp/suite/full/gpu_tests.log "$OUT/gpu_tests.log" 2>/dev/null; fi
# the timing benchmarks, each with the seconds it needs (its last wall on one H100 or H200, with a margin), in order
for nb in "capture_overhead_bench 200" "train_step_bench 260" "train_step_fix 140" "train_step_qknorm 130" \
          "train_step_remedies 190" "train_step_gpt2 260" "census_cost 190" "monitor_overhead 120"; do
  read -r n need <<< "$nb"
  stale $n && [ ! -f $R/full/$n.json ] && [ "$(left)" -gt $need ] && run $n
done
if todo loop_certificate_gpt2 && [ "$(n_left loop_certificate_gpt2)" != 0 ] && [ "$(left)" -gt 300 ]; then
  run loop_certificate_gpt2 --set max_s=$(( $(left) - 230 )); log "gpt2 left: $(n_left loop_certificate_gpt2)"
fi
# one archive of every result so far (a call returns at most 8 files): tar xzf results.tgz -C results (here)
tar czf "$OUT/results.tgz" -C $R full 2>/dev/null; cp /tmp/runs.log "$OUT/runs.log"; cp /tmp/hold.log "$OUT/hold.log"
log "phase $P done"; ls "$OUT"
