#!/usr/bin/env bash
# Checks the Slurm launch of docs/launch.md on this one machine: starts a throwaway single-node
# Slurm cluster (munged, slurmctld, slurmd) under a temporary folder, runs `rlc run` through it
# and prints PASS/FAIL per check with its figures; stops the daemons on exit.
#
#   scripts/slurm-check.sh [RLC]     RLC: an `rlc` built with the `mpi` feature
#                                    (default target/debug/rlc); this script never builds
#
# As root on Debian/Ubuntu (installs slurm-wlm, munge and jq with apt when missing). The checks,
# on the 2-rank plan of examples/grpo_digits.rl (checkpointing every step, as tests/processes.rs):
#   1. the cluster comes up: the node is idle, `srun --mpi=list` offers pmix;
#   2. `srun --mpi=pmix -n 2 --kill-on-bad-exit=1 rlc run …` logs the same metrics as the ranks
#      as threads of one `rlc run` (all keys but `seconds`, `tokens_per_s` and `time/…`);
#   3. `srun --mpi=pmi2` (reported, not required: Debian's Open MPI 4.1 has no PMI-2 support);
#      a plain `srun -n 2` without `--mpi` is refused (no PMI: the processes cannot connect);
#   4. `srun -n 3` for the 2-rank plan is refused with rlc's message;
#   5. stopped after 2 steps and resumed (`--resume`) under srun: the same metrics;
#   6. the batch script of docs/launch.md (one node, two tasks) through `sbatch`: its output file
#      and its metrics;
#   7. `mpirun -np "$SLURM_NTASKS"` inside an allocation (`salloc`): the same metrics;
#   8. `kill -9` of rank 1 mid-run: srun (--kill-on-bad-exit=1) ends the job, naming the task,
#      and rank 0 is gone too; the time from the kill to srun's end is printed.
# Environment: RLC_SLURM_DIR (the cluster's folder; default a new /tmp/rlc-slurm.XXXXXX, removed
# when every check passed), RLC_SLURM_PORT (slurmctld's port, slurmd takes the next; 16817).
# Single node only: several machines are still untested.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rlc="$(realpath "${1:-$repo/target/debug/rlc}")"
port="${RLC_SLURM_PORT:-16817}"

die() { echo "error: $*" >&2; exit 2; }

[[ "$(id -u)" == 0 ]] || die "run as root (the throwaway cluster runs its daemons as root)"
[[ -x "$rlc" ]] || die "$rlc: no such binary (build it with: cargo build --features mpi)"
# libtorch at run time: the one scripts/setup-libtorch.sh unpacks, or $LIBTORCH.
for lib in "${LIBTORCH:+$LIBTORCH/lib}" "$repo/.deps/libtorch/torch/lib"; do
    [[ -n "$lib" && -d "$lib" ]] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
done
# A build without the feature would run every process as a whole 2-rank job of its own.
libraries="$(ldd "$rlc")"
grep -q 'libmpi\.so' <<<"$libraries" ||
    die "$rlc does not link libmpi: build it with the mpi feature (cargo build --features mpi)"
if grep -q 'not found' <<<"$libraries"; then
    die "$rlc: missing libraries: $(grep 'not found' <<<"$libraries" | tr -s '\n\t' ' ')"
fi

# --- Slurm and munge from the distribution ------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v munged >/dev/null || ! command -v jq >/dev/null; then
    echo "== installing slurm-wlm munge jq (Debian packages)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge jq >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q slurm-wlm munge jq >&2; }
fi
command -v mpirun >/dev/null || die "mpirun missing: bash scripts/setup-mpi.sh"

# --- a throwaway single-node cluster ---------------------------------------------------------
dir="${RLC_SLURM_DIR:-$(mktemp -d /tmp/rlc-slurm.XXXXXX)}"
mkdir -p "$dir"/{munge,state,spool,log,work}
chmod 755 "$dir" "$dir/munge"
host="$(hostname -s)"
export SLURM_CONF="$dir/slurm.conf"
# Open MPI's shared-memory transport uses cross-memory attach, which containers often forbid;
# srun passes this (like the whole environment) on to the ranks.
export OMPI_MCA_btl_vader_single_copy_mechanism=none

failures=0
all_passed=0
stop_cluster() {
    # Jobs first, so that no slurmstepd or rank outlives the daemons; then the daemons by the
    # pids they wrote (nothing else on the machine is touched).
    if [[ -f "$dir/slurmctld.pid" ]]; then
        scancel --quiet --partition=check 2>/dev/null || true
        for _ in $(seq 50); do
            [[ -z "$(squeue -h 2>/dev/null)" ]] && break
            sleep 0.2
        done
    fi
    # One at a time, each waited for: slurmd still talks to slurmctld (through munge) as it
    # shuts down, and left alone outlives the script.
    local pidfile pid
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [[ -f "$pidfile" ]] || continue
        pid="$(cat "$pidfile")"
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [[ "$all_passed" == 1 && -z "${RLC_SLURM_DIR:-}" ]]; then
        rm -rf "$dir"
    else
        echo "the cluster's folder (logs in log/, runs in work/): $dir" >&2
    fi
}
trap stop_cluster EXIT

# munged with its own key and socket, so that a munge already running here is left alone.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --log-file="$dir/log/munged.log" --pid-file="$dir/munge/munged.pid" \
    --seed-file="$dir/munge/munged.seed"

# No cgroups (containers rarely let one use them): processes are tracked through /proc and not
# bound to CPUs. CPUs=4 with config_overrides lets a 2-core machine take the 3-process launch
# (one task more than the machine has cores).
cpus=$(( $(nproc) > 4 ? $(nproc) : 4 ))
cat >"$SLURM_CONF" <<EOF
ClusterName=rlccheck
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"

pass() { printf 'PASS  %-28s %s\n' "$1" "$2"; }
fail() { printf 'FAIL  %-28s %s\n' "$1" "$2"; failures=$((failures + 1)); }
info() { printf 'INFO  %-28s %s\n' "$1" "$2"; }

state=""
for _ in $(seq 60); do
    state="$(sinfo -h -o %t 2>/dev/null || true)"
    [[ "$state" == idle ]] && break
    sleep 0.5
done
if [[ "$state" == idle ]]; then
    pass "cluster up" "$(sinfo -h -o '%P %D node %N %t, %c CPUs') (Slurm $(sinfo -V | cut -d' ' -f2))"
else
    fail "cluster up" "node state '${state}'; logs: $dir/log"
    exit 1
fi
# "MPI plugin types are... pmix none cray_shasta pmi2 specific pmix plugin versions …": the names.
plugins="$(srun --mpi=list 2>&1 | grep -v ':' | grep -v 'are\.\.\.' | tr -s ' \t\n' ' ')"
if [[ "$plugins" == *pmix* ]]; then
    pass "srun --mpi=list" "$plugins"
else
    fail "srun --mpi=list" "no pmix: $plugins"
fi

# --- the job ------------------------------------------------------------------------------
work="$dir/work"
cd "$work"
# As tests/processes.rs: the example (dp(2): 2 ranks), checkpointing every step.
sed 's/every 100 steps/every 1 steps/' "$repo/examples/grpo_digits_by_hand.rl" >job.rl
grep -q 'with dp(2)' job.rl || die "examples/grpo_digits.rl no longer places dp(2)"

# Each step's metrics without the keys that time it (the only ones that may differ).
metrics() {
    jq -c 'del(.seconds, .tokens_per_s) | with_entries(select(.key | startswith("time/") | not))' \
        "$1/metrics.jsonl"
}
# "identical (N steps, last reward R kl K)" or why not; status 1 when they differ.
same_metrics() {
    local expected got
    expected="$(metrics threads)"
    got="$(metrics "$1" 2>/dev/null)" || { echo "no metrics.jsonl in $1"; return 1; }
    if [[ "$got" == "$expected" ]]; then
        echo "identical to threads ($(wc -l <<<"$got") steps, last $(tail -1 <<<"$got" |
            jq -r '"reward \(.reward) kl \(.kl)"'))"
    else
        echo "differ from threads: $(diff <(echo "$expected") <(echo "$got") | head -4 | tr '\n' ' ')"
        return 1
    fi
}
step_time() { grep -o 'time per step: .*' "$1" | head -1; }

# The reference: the 2 ranks as threads of one process.
if "$rlc" run job.rl --out threads --stop-after 3 >threads.log 2>&1; then
    pass "threads (reference)" "$(wc -l <threads/metrics.jsonl) steps; $(step_time threads.log)"
else
    fail "threads (reference)" "$(tail -3 threads.log)"
    exit 1
fi

# A run as processes into folder DIR that `launched` (true or false), logging into LOG: PASS
# with its figures when its metrics are the threads', FAIL otherwise.
check_processes() {
    local check="$1" dir="$2" log="$3" launched="$4" figures
    if [[ "$launched" == true ]] && grep -q '2 ranks as processes' "$log"; then
        if figures="$(same_metrics "$dir")"; then
            pass "$check" "$figures; $(step_time "$log")"
        else
            fail "$check" "$figures"
        fi
    else
        fail "$check" "$(tail -5 "$log" | tr '\n' ' ')"
    fi
}

# 2. srun --mpi=pmix: Debian's Slurm 22.05 and Open MPI 4.1 both use PMIx 4 (libpmix2).
srun --mpi=pmix -n 2 --kill-on-bad-exit=1 "$rlc" run job.rl --out pmix --stop-after 3 \
    >pmix.log 2>&1 && launched=true || launched=false
check_processes "srun --mpi=pmix -n 2" pmix pmix.log "$launched"

# 3. srun --mpi=pmi2: informative only (Open MPI must have been built with Slurm's PMI-2).
if timeout 120 srun --mpi=pmi2 -n 2 --kill-on-bad-exit=1 "$rlc" run job.rl --out pmi2 \
    --stop-after 3 >pmi2.log 2>&1 && figures="$(same_metrics pmi2)"; then
    info "srun --mpi=pmi2 -n 2" "works: $figures"
elif grep -q 'not built with SLURM.s PMI support' pmi2.log; then
    info "srun --mpi=pmi2 -n 2" "refused by Open MPI: \"OMPI was not built with SLURM's PMI support\" (use pmix)"
else
    info "srun --mpi=pmi2 -n 2" "does not work: $(grep -m1 -i error pmi2.log || tail -1 pmi2.log)"
fi

# 3b. srun without --mpi (this cluster's MpiDefault is none): no PMI reaches the processes, which
# could not find each other; rlc sees Slurm's task variables without PMI and refuses, rather than
# let each process run the whole job into the same run folder.
timeout 120 srun -n 2 --kill-on-bad-exit=1 "$rlc" run job.rl --out nompi --stop-after 3 \
    >nompi.log 2>&1 && nompi_rc=0 || nompi_rc=$?
if [[ "$nompi_rc" != 0 ]] && grep -q "without MPI's process management" nompi.log; then
    pass "srun -n 2 (no --mpi)" "refused, exit $nompi_rc: $(grep -m1 "without MPI" nompi.log)"
else
    fail "srun -n 2 (no --mpi)" "exit $nompi_rc: $(grep -m1 'error' nompi.log || tail -1 nompi.log)"
fi

# 4. One process too many: refused before any step, with rlc's message, by every rank.
expected_refusal="the plan has 2 ranks, the launcher started 3 processes"
if srun --mpi=pmix -n 3 --kill-on-bad-exit=1 "$rlc" run job.rl --out three --stop-after 1 \
    >three.log 2>&1; then
    fail "srun -n 3 (2-rank plan)" "srun succeeded"
elif grep -q "$expected_refusal" three.log; then
    pass "srun -n 3 (2-rank plan)" "refused: $(grep -m1 -o "error: the run stopped.*processes" three.log)"
else
    fail "srun -n 3 (2-rank plan)" "without rlc's message: $(tail -3 three.log | tr '\n' ' ')"
fi

# 5. Stopped after 2 steps, resumed from the checkpoint as processes: the same 3 steps.
srun --mpi=pmix -n 2 --kill-on-bad-exit=1 "$rlc" run job.rl --out resumed --stop-after 2 \
    >resumed.log 2>&1 &&
    srun --mpi=pmix -n 2 --kill-on-bad-exit=1 "$rlc" run job.rl --out resumed --stop-after 3 \
        --resume >>resumed.log 2>&1 && launched=true || launched=false
check_processes "srun ... --resume" resumed resumed.log "$launched"

# 6. The batch script of docs/launch.md, on this one node: 2 tasks of 1 CPU, CPU libtorch.
cat >job.sbatch <<EOF
#!/bin/bash
#SBATCH --job-name=rlc-sbatch
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --output=$work/sbatch-%j.out

export LD_LIBRARY_PATH="$LD_LIBRARY_PATH"
srun --mpi=pmix --kill-on-bad-exit=1 "$rlc" run "$work/job.rl" --out "$work/sbatch" \\
    --stop-after 3
EOF
job="$(sbatch --parsable job.sbatch)"
for _ in $(seq 600); do
    [[ -z "$(squeue -h -j "$job" 2>/dev/null)" ]] && break
    sleep 0.5
done
job_state="$(scontrol show job "$job" | grep -o 'JobState=[A-Z_]*') $(scontrol show job "$job" |
    grep -o ' ExitCode=[0-9:]*')"
if [[ "$job_state" == "JobState=COMPLETED  ExitCode=0:0" ]] &&
    grep -q '2 ranks as processes' "sbatch-$job.out" && grep -q '^run folder:' "sbatch-$job.out" &&
    figures="$(same_metrics sbatch)"; then
    pass "sbatch job.sbatch" "job $job $job_state; sbatch-$job.out: $figures; $(step_time "sbatch-$job.out")"
else
    fail "sbatch job.sbatch" "job $job $job_state: $(tail -5 "sbatch-$job.out" 2>&1 | tr '\n' ' ')"
fi

# 7. mpirun inside an allocation (Open MPI starts its daemons through Slurm).
salloc -n 2 --job-name=rlc-mpirun bash -c \
    "mpirun --allow-run-as-root -np \"\$SLURM_NTASKS\" '$rlc' run job.rl --out mpirun --stop-after 3" \
    >mpirun.log 2>&1 && launched=true || launched=false
check_processes "salloc -n 2 mpirun -np 2" mpirun mpirun.log "$launched"

# 8. A rank killed mid-run: with --kill-on-bad-exit=1 srun ends the step and the job.
srun --mpi=pmix -n 2 --kill-on-bad-exit=1 --job-name=rlc-kill "$rlc" run job.rl --out kill \
    >kill.log 2>&1 &
srun_pid=$!
for _ in $(seq 900); do # the first step logged: the ranks are past their start
    [[ -f kill/metrics.jsonl && $(wc -l <kill/metrics.jsonl) -ge 2 ]] && break
    kill -0 "$srun_pid" 2>/dev/null || break
    sleep 0.2
done
kill_job="$(squeue -h -n rlc-kill -o %i)"
# scontrol listpids: PID JOBID STEPID LOCALID GLOBALID, the ranks being the global ids.
rank_pid() { scontrol listpids "$kill_job" | awk -v r="$1" '$5 == r && $3 == 0 { print $1 }'; }
victim="$(rank_pid 1)"
survivor="$(rank_pid 0)"
if [[ -z "$kill_job" || -z "$victim" || -z "$survivor" ]]; then
    fail "kill -9 rank 1" "no running job/ranks to kill (job '$kill_job'): $(tail -3 kill.log | tr '\n' ' ')"
    kill "$srun_pid" 2>/dev/null || true
else
    steps_before="$(wc -l <kill/metrics.jsonl)"
    kill -9 "$victim"
    killed_at=$(date +%s.%N)
    for _ in $(seq 600); do
        kill -0 "$srun_pid" 2>/dev/null || break
        sleep 0.1
    done
    ended_after="$(printf '%.2f' "$(echo "$(date +%s.%N) - $killed_at" | bc)")"
    srun_rc=0
    wait "$srun_pid" || srun_rc=$?
    # The job leaves the queue once Slurm has cleaned up after srun (COMPLETING for a moment).
    for _ in $(seq 300); do
        [[ -z "$(squeue -h -j "$kill_job" 2>/dev/null)" ]] && break
        sleep 0.1
    done
    job_gone_after="$(printf '%.2f' "$(echo "$(date +%s.%N) - $killed_at" | bc)")"
    survivor_state="$(ps -o stat= -p "$survivor" 2>/dev/null || true)"
    if [[ "$srun_rc" != 0 && -z "$(squeue -h -j "$kill_job" 2>/dev/null)" &&
        ( -z "$survivor_state" || "$survivor_state" == Z* ) ]] &&
        grep -q 'task 1: Killed' kill.log; then
        pass "kill -9 rank 1" "srun ended ${ended_after}s after the kill (exit $srun_rc, after $steps_before logged steps), the job left the queue after ${job_gone_after}s: $(grep -m1 'task 1: Killed' kill.log)"
    else
        fail "kill -9 rank 1" "srun exit $srun_rc after ${ended_after}s, job $kill_job: '$(squeue -h -j "$kill_job" -o %T 2>/dev/null)', rank 0: '$survivor_state': $(tail -4 kill.log | tr '\n' ' ')"
    fi
fi

if [[ "$failures" == 0 ]]; then
    all_passed=1
    echo "all Slurm checks passed ($rlc)"
else
    echo "$failures Slurm check(s) failed" >&2
    exit 1
fi
