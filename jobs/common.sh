# shellcheck shell=bash
# Shared by jobs/*.slurm (sourced, not run): site set-up, threads per rank, the MPI
# launcher, and running one job step so that a signal to the batch shell reaches it.
# Everything site-specific belongs in jobs/site/*.env, never here (see jobs/README.md).

mpidwe_log() {
    printf '[mpidwe %s job %s run %s] %s\n' "$(date '+%F %T')" "${SLURM_JOB_ID:-none}" \
        "$(( ${SLURM_RESTART_COUNT:-0} + 1 ))" "$*"
}

mpidwe_die() {
    mpidwe_log "error: $*" >&2
    exit 2
}

# jobs/site/*.env, in name order: module loads, the virtual environment, network variables.
mpidwe_source_site() {
    local dir=${MPIDWE_SITE_DIR:-$MPIDWE_HOME/jobs/site} f
    for f in "$dir"/*.env; do
        [[ -f $f ]] || continue
        mpidwe_log "site settings: $f"
        set +u          # module(1) and many activate scripts read unset variables
        # shellcheck disable=SC1090
        source "$f"
        set -u
    done
}

# The CPUs Slurm gave each task: --cpus-per-task where the job asked for it, otherwise the
# fewest CPUs per task over the job's nodes (SLURM_JOB_CPUS_PER_NODE / SLURM_TASKS_PER_NODE,
# e.g. "32(x4)" and "1(x4)": 4 nodes of 32 CPUs, one task each -> 32). A job that asked for
# no task count (no SLURM_NTASKS) is one task per node, whatever SLURM_TASKS_PER_NODE says
# (an --exclusive job's counts its CPUs). Empty outside Slurm.
mpidwe_cpus_per_task() {
    if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then
        echo "$SLURM_CPUS_PER_TASK"
        return 0
    fi
    local cpus tasks n per fewest=''
    if [[ -n ${SLURM_JOB_CPUS_PER_NODE:-} && -n ${SLURM_TASKS_PER_NODE:-} ]]; then
        read -r -a cpus <<<"$(mpidwe_per_node "$SLURM_JOB_CPUS_PER_NODE")"
        read -r -a tasks <<<"$(mpidwe_per_node "$SLURM_TASKS_PER_NODE")"
        if [[ -z ${SLURM_NTASKS:-} ]]; then
            for n in "${!tasks[@]}"; do tasks[n]=1; done
        fi
        for (( n = 0; n < ${#cpus[@]} && n < ${#tasks[@]}; n++ )); do
            (( tasks[n] > 0 )) || continue
            per=$(( cpus[n] / tasks[n] ))
            if [[ -z $fewest ]] || (( per < fewest )); then
                fewest=$per
            fi
        done
    elif [[ -n ${SLURM_CPUS_ON_NODE:-} && -n ${SLURM_NTASKS_PER_NODE:-} ]]; then
        fewest=$(( SLURM_CPUS_ON_NODE / SLURM_NTASKS_PER_NODE ))
    fi
    if [[ -n $fewest ]] && (( fewest < 1 )); then
        fewest=1
    fi
    echo "$fewest"
}

# The job's ranks: its tasks, or one per node where it asked for no task count (srun's default).
mpidwe_ranks() {
    echo "${SLURM_NTASKS:-${SLURM_JOB_NUM_NODES:-1}}"
}

# Slurm's compressed per-node lists, one number per node: "32(x2),16" -> "32 32 16".
mpidwe_per_node() {
    local item out=() i items
    IFS=, read -r -a items <<<"$1"
    for item in "${items[@]}"; do
        if [[ $item =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
            for (( i = 0; i < BASH_REMATCH[2]; i++ )); do out+=("${BASH_REMATCH[1]}"); done
        else
            out+=("$item")
        fi
    done
    echo "${out[*]}"
}

# CPU threads for each rank: MPIDWE_THREADS, or the CPUs Slurm gave each task (above), so
# that a job takes whatever allocation it gets. The jobs pass it as --threads and
# OMP_NUM_THREADS: where Slurm does not bind tasks to CPUs, every rank sees all the node's
# cores and would start that many threads. (srun needs --cpus-per-task again, see
# mpidwe_launcher: since Slurm 22.05 it no longer takes it from the batch job's environment.)
mpidwe_threads() {
    local n=${MPIDWE_THREADS:-$(mpidwe_cpus_per_task)}
    (( ${n:-0} >= 1 )) || n=1
    echo "$n"
}

# The command that starts one process per Slurm task, as the array MPIDWE_LAUNCH.
#   MPIDWE_LAUNCHER=srun (default)  srun with the PMI the MPI on PATH speaks:
#                                   --mpi=pmi2 for MPICH (and MPICH derivatives),
#                                   --mpi=pmix for Open MPI (its mpiexec where srun's
#                                   PMIx plugin does not load)
#   MPIDWE_LAUNCHER=mpirun          the MPI's own mpiexec inside the allocation (it reads
#                                   the node list from Slurm)
#   MPIDWE_LAUNCHER="any command"   used as given, e.g. "srun --mpi=pmix_v4"
mpidwe_launcher() {
    local choice=${MPIDWE_LAUNCHER:-srun} version flavour plugins cpus
    version=$(mpiexec --version 2>&1 || true)
    case $version in
        *"Open MPI"* | *OpenRTE* | *PRRTE*) flavour=openmpi ;;
        *HYDRA* | *MPICH* | *"Intel(R) MPI"*) flavour=mpich ;;
        *) flavour=unknown ;;
    esac
    case $choice in
        srun)
            MPIDWE_LAUNCH=(srun)
            plugins=$(srun --mpi=list 2>&1 || true)
            if [[ $flavour == mpich && $plugins == *pmi2* ]]; then
                MPIDWE_LAUNCH+=(--mpi=pmi2)
            elif [[ $flavour == openmpi && $plugins == *pmix* ]] \
                    && srun --mpi=pmix --nodes=1 --ntasks=1 true >/dev/null 2>&1; then
                MPIDWE_LAUNCH+=(--mpi=pmix)
            elif [[ $flavour == openmpi ]]; then
                # listed is not loadable: Debian's plugin needs libpmix-dev's libpmix.so
                mpidwe_log "warning: srun --mpi=pmix does not work here; using Open MPI's mpiexec" >&2
                MPIDWE_LAUNCH=(mpiexec -n "$(mpidwe_ranks)" --bind-to none)
                [[ -n ${SLURM_NTASKS:-} ]] || MPIDWE_LAUNCH+=(--map-by ppr:1:node)
                return 0
            else
                mpidwe_log "warning: no srun MPI plugin for this MPI ($flavour); using Slurm's MpiDefault" \
                           "(set MPIDWE_LAUNCHER=mpirun if the ranks do not see each other)" >&2
            fi
            cpus=$(mpidwe_cpus_per_task)
            if [[ -n $cpus ]]; then
                MPIDWE_LAUNCH+=(--cpus-per-task="$cpus")
            fi
            ;;
        mpirun | mpiexec)
            command -v mpiexec >/dev/null || mpidwe_die "MPIDWE_LAUNCHER=$choice but no mpiexec on PATH"
            MPIDWE_LAUNCH=(mpiexec -n "$(mpidwe_ranks)")
            # Open MPI binds each rank of a 1- or 2-rank job to one core: its threads would share it
            if [[ $flavour == openmpi ]]; then
                MPIDWE_LAUNCH+=(--bind-to none)
            fi
            # no task count asked: one rank per node, as srun starts them (mpiexec would fill
            # the first node's slots, which an --exclusive job counts in CPUs)
            if [[ -z ${SLURM_NTASKS:-} && $flavour == openmpi ]]; then
                MPIDWE_LAUNCH+=(--map-by ppr:1:node)
            elif [[ -z ${SLURM_NTASKS:-} ]]; then
                MPIDWE_LAUNCH+=(-ppn 1)
            fi
            ;;
        *)
            read -r -a MPIDWE_LAUNCH <<<"$choice"
            ;;
    esac
}

# Start "$@" in the background and wait for it. SIGUSR1 to the batch shell (Slurm's
# time-limit warning, #SBATCH --signal=B:USR1@..., or `scancel --batch --signal=USR1`)
# is passed on once to the launcher, which passes it on to every rank (srun and MPICH's
# mpiexec both do); the ranks checkpoint at their next sync point and exit 75.
# Not before the ranks can take it: srun drops a signal that comes while it is still
# starting its tasks, and Python dies of one that comes before its handler is set. With
# MPIDWE_READY_FILE set (train.slurm: RUN_DIR/config.json, which rank 0 writes once every
# rank has its handler) the signal waits until that file is new, at most
# MPIDWE_READY_TIMEOUT seconds (60).
# Only USR1: srun turns a SIGTERM into SIGKILL for its tasks, and a SIGTERM to the batch
# shell means the job is being cancelled anyway.
mpidwe_step() {
    local rc
    MPIDWE_READY_STAMP=$(mpidwe_ready_stamp)
    "$@" &
    MPIDWE_STEP_PID=$!
    if [[ -n ${MPIDWE_STOP:-} ]]; then
        mpidwe_forward_stop
    fi
    while :; do
        rc=0
        wait "$MPIDWE_STEP_PID" || rc=$?
        # a trapped signal ends `wait` early (status > 128) while the step still runs
        kill -0 "$MPIDWE_STEP_PID" 2>/dev/null || break
    done
    if [[ -n ${MPIDWE_FORWARDER:-} ]]; then
        kill "$MPIDWE_FORWARDER" 2>/dev/null || true
        wait "$MPIDWE_FORWARDER" 2>/dev/null || true
    fi
    MPIDWE_STEP_PID=''
    MPIDWE_FORWARDER=''
    return "$rc"
}

mpidwe_ready_stamp() {
    if [[ -n ${MPIDWE_READY_FILE:-} ]]; then
        stat -c '%i %y' "$MPIDWE_READY_FILE" 2>/dev/null || echo missing
    fi
}

mpidwe_forward_stop() {
    [[ -z ${MPIDWE_FORWARDER:-} ]] || return 0
    local pid=$MPIDWE_STEP_PID before=$MPIDWE_READY_STAMP
    (
        waited=0
        while [[ -n ${MPIDWE_READY_FILE:-} && $(mpidwe_ready_stamp) == "$before" ]] \
                && (( waited < ${MPIDWE_READY_TIMEOUT:-60} )) && kill -0 "$pid" 2>/dev/null; do
            sleep 1
            waited=$(( waited + 1 ))
        done
        kill -USR1 "$pid" 2>/dev/null || true
    ) &
    MPIDWE_FORWARDER=$!
}

mpidwe_on_usr1() {
    MPIDWE_STOP=1
    mpidwe_log "SIGUSR1: asking the ranks to checkpoint and stop"
    if [[ -n ${MPIDWE_STEP_PID:-} ]]; then
        mpidwe_forward_stop
    fi
}

# MPICH (4.x and 5; seen with 5.0.2) names its node-local shared memory
# /dev/shm/mpich_{shm,vci}_HASH_NODE after an FNV-1a hash of the PMI job name, which under
# srun is "JOBID.STEPID": the same again
# when a requeued job starts its steps. Ranks that died (killed at the time limit, by a
# preemption, or by a signal during start-up) leave their segment behind, and the next
# start of the job would attach to it and fail or hang in MPI_Init. So a restarted job
# first removes the segments of its own job id on every node.
mpidwe_clean_mpich_shm() {
    (( ${SLURM_RESTART_COUNT:-0} > 0 )) || return 0
    [[ ${MPIDWE_LAUNCH[0]} == srun ]] || return 0
    local names=() step name hash i byte
    for step in {0..15}; do
        name=$SLURM_JOB_ID.$step
        hash=2166136261
        for (( i = 0; i < ${#name}; i++ )); do
            printf -v byte '%d' "'${name:i:1}"
            hash=$(( ((hash ^ byte) * 16777619) & 0xFFFFFFFF ))
        done
        printf -v hash '%x' "$hash"
        names+=("/dev/shm/mpich_shm_${hash}_*" "/dev/shm/mpich_vci_${hash}_*")
    done
    # shellcheck disable=SC2016  # $* is expanded (and globbed) by the remote bash
    srun --nodes="${SLURM_JOB_NUM_NODES:-1}" --ntasks="${SLURM_JOB_NUM_NODES:-1}" --ntasks-per-node=1 \
        --mpi=none bash -c 'rm -f -- $*' mpidwe-clean "${names[@]}" \
        || mpidwe_log "warning: could not remove stale MPICH shared memory of job $SLURM_JOB_ID" >&2
}

mpidwe_describe() {
    mpidwe_log "${SLURM_JOB_NAME:-mpidwe} on ${SLURM_JOB_NUM_NODES:-1} node(s)" \
               "(${SLURM_JOB_NODELIST:-localhost}), $(mpidwe_ranks) rank(s) x $MPIDWE_NUM_THREADS" \
               "thread(s); launcher: ${MPIDWE_LAUNCH[*]}"
}
