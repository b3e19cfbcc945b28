"""The Slurm cluster profile checked before anything is submitted, and sbatch's refusals in one line.

``check_profile`` is the back end's answer to the planner (``launcher.backend``).
``check_formats`` runs always (the dry run too): every value the profile turns into an sbatch
option must be in a form Slurm accepts (the time, memory and gres forms are ``facts.slurm_formats``,
which the settings schema uses too). ``check_against_cluster`` asks the cluster itself where it
can answer (``scontrol show partition``, ``sinfo``, ``sacctmgr``): the partition exists, a node of
it has the gres, memory, CPUs and features asked for, the time fits its limit, and the account and
QOS are ones the user may use (Slurm without enforced accounting silently runs a job under another
account, and the bundle would record the wrong one). ``explain_refusal`` turns sbatch's error
into one line naming the profile key and the fix.
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import shutil

from omegaconf import DictConfig

from facts.slurm_formats import TIME_FORMS, gres_ok, limit_minutes, mem_mb, mem_ok, time_ok
from launcher.errors import PreflightError
from launcher.job_sizing import GIB, GPU_MEMORY_GIB, Limits, gpu_name
from launcher.job_spec import allocation_shape
from launcher.slurm.commands import no_controller, no_controller_line, not_on_path, pipe_records, run_slurm
from trainer.schema import ClusterSchema

_NAME = re.compile(r"^[\w.-]+$")
_CONSTRAINT = re.compile(r"^[\w.\-&|,\[\]()*:]+$")
_PROFILE = "conf/cluster/<profile>.yaml or cluster.<key>=... on the command line"


def _value(cluster: DictConfig, key: str):
    value = cluster.get(key)
    return None if value in (None, "") else value


def _positive_int(value) -> int | None:
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if number >= 1 else None


# The keys of a Slurm profile (conf/cluster/slurm.yaml documents each); any other key is a typo
# or an sbatch option that belongs under ``sbatch:``, and would otherwise be dropped silently.
# They are the fields of the one settings schema, less the local back end's own.
PROFILE_KEYS = frozenset(f.name for f in dataclasses.fields(ClusterSchema)) - {"max_parallel"}
# sbatch options the profile sets through its own keys (or submitit sets): not allowed under ``sbatch:``.
MANAGED_OPTIONS = {"array": "the grid", "partition": "partition", "account": "account", "qos": "qos", "gres": "gres",
                   "cpus-per-task": "cpus_per_task", "mem": "mem", "time": "time", "constraint": "constraint",
                   "requeue": "requeue", "signal": "signal_delay_s", "job-name": "the sweep's name",
                   "output": "submitit", "error": "submitit", "wrap": "submitit", "open-mode": "submitit",
                   "nodes": "nodes", "ntasks-per-node": "tasks_per_node", "ntasks": "nodes x tasks_per_node",
                   "gpus-per-node": "gpus_per_node"}
_OPTION = re.compile(r"^[a-z][a-z0-9-]*$")


def extra_sbatch_options(cluster: DictConfig) -> dict[str, str | bool]:
    """The profile's ``sbatch:`` mapping (``mail-type: END``, ``exclusive: true``, ``exclude: n[1-2]``,
    ``dependency``, ``reservation``, ``gpus-per-task``, ``comment``, ...) as sbatch long options;
    ``true`` is a bare flag, ``false``/null leave the option out."""
    extra = cluster.get("sbatch") or {}
    return {str(k).replace("_", "-"): (v if isinstance(v, bool) else str(v))
            for k, v in extra.items() if v is not None and v is not False}


def setup_lines(cluster: DictConfig) -> list[str]:
    """The profile's ``setup:`` lines, run in the batch script before the job (``module load ...``)."""
    return [str(line) for line in (cluster.get("setup") or [])]


def check_profile(cluster: DictConfig, dry_run: bool, wait: bool) -> None:
    """The profile's formats always; the cluster itself only when submitting (a dry run asks nobody)."""
    check_formats(cluster)
    if not dry_run:
        check_against_cluster(cluster)


def check_resources(workload: DictConfig, cluster: DictConfig, dp_size: int = 1) -> None:
    """A task of the profile holds a job of ``workload``: its CPUs, and a GPU when it needs one. A job
    of several tasks (``cluster.nodes`` x ``cluster.tasks_per_node``) runs one rank per task, so its
    ``dp_size`` is their product, and on a GPU workload each node has a GPU per rank."""
    cpus = int(workload.cpus_per_job)
    if int(cluster.cpus_per_task) < cpus:
        raise PreflightError(
            f"cluster.cpus_per_task={cluster.cpus_per_task} is less than the {cpus} CPUs a job of "
            f"workload {workload.name} needs; set cluster.cpus_per_task>={cpus}"
        )
    nodes, per_node = allocation_shape(cluster)
    tasks = nodes * per_node
    if tasks > 1 and int(dp_size) != tasks:
        fix = f"set dp_size={tasks}"
        if int(dp_size) % nodes == 0:
            fix += f" or cluster.tasks_per_node={int(dp_size) // nodes}"
        raise PreflightError(
            f"dp_size={dp_size} is not cluster.nodes x cluster.tasks_per_node = {nodes} x {per_node} = {tasks}: a job "
            f"of several tasks runs one trainer rank per task; {fix}"
        )
    gpus = int(workload.gpus_per_job)
    if gpus > 0 and not cluster.get("gres") and not (tasks > 1 and cluster.get("gpus_per_node")):
        raise PreflightError(
            f"workload {workload.name} needs a GPU per job but cluster.gres is empty; "
            + ("set cluster.gpus_per_node=" + str(per_node * gpus) if tasks > 1 else "set cluster.gres=gpu:<model>:1")
            + " (see conf/cluster/)"
        )
    if gpus > 0 and tasks > 1 and (given := cluster.get("gpus_per_node")) and int(given) < per_node * gpus:
        raise PreflightError(
            f"cluster.gpus_per_node={given} is fewer than the {per_node * gpus} GPUs of a node's {per_node} rank(s) "
            f"(workload.gpus_per_job={gpus} each); set cluster.gpus_per_node={per_node * gpus}"
        )


# What the Slurm back end runs: submission, accounting (states), cancellation.
SLURM_COMMANDS = ("sbatch", "sacct", "scancel")


def check_environment(cluster: DictConfig, dry_run: bool) -> None:
    """Submitting needs Slurm's commands here (a dry run submits nothing and needs none)."""
    if dry_run:
        return
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise PreflightError(f"cluster=slurm needs {not_on_path(missing)}, or use cluster=local")


def check_formats(cluster: DictConfig) -> None:
    """One-line ``PreflightError`` for the first profile value Slurm could not parse."""
    def bad(key: str, value, form: str):
        raise PreflightError(f"cluster.{key}={value!r} is not a valid Slurm value; use {form} ({_PROFILE})")

    unknown = sorted(set(cluster.keys()) - PROFILE_KEYS)
    if unknown:
        raise PreflightError(f"unknown cluster setting {unknown[0]!r}; an extra sbatch option goes under "
                             f"cluster.sbatch (e.g. cluster.sbatch.{unknown[0].replace('_', '-')}=...), "
                             f"known settings: {', '.join(sorted(PROFILE_KEYS))}")
    extra = cluster.get("sbatch") or {}
    if not hasattr(extra, "items"):
        bad("sbatch", extra, "a mapping of sbatch long options, e.g. {mail-type: END, exclusive: true}")
    for option, value in extra_sbatch_options(cluster).items():
        if not _OPTION.match(option):
            bad(f"sbatch.{option}", value, "an sbatch long option name without dashes, e.g. mail-type")
        if option in MANAGED_OPTIONS:
            owner = MANAGED_OPTIONS[option]
            raise PreflightError(f"cluster.sbatch.{option} is set by proofgrid ({owner}); "
                                 + (f"use cluster.{owner} instead" if owner in PROFILE_KEYS else "remove it"))
        if isinstance(value, str) and "\n" in value:
            bad(f"sbatch.{option}", value, "a single-line value")
    setup = cluster.get("setup") or []
    if isinstance(setup, str) or not all(isinstance(line, str) and "\n" not in line for line in setup):
        bad("setup", setup, "a list of single-line shell commands, e.g. ['module load cuda/12.4']")

    if _value(cluster, "partition") is None or not _NAME.match(str(cluster.partition)):
        bad("partition", cluster.get("partition"), "a partition name (see `sinfo`)")
    if (t := _value(cluster, "time")) is not None and not time_ok(t if isinstance(t, int) else str(t)):
        bad("time", t, f"{TIME_FORMS}, e.g. 06:00:00")
    if (m := _value(cluster, "mem")) is not None and not mem_ok(str(m)):
        bad("mem", m, "a size such as 4G, 64000M or 0 (all of a node's memory)")
    if (g := _value(cluster, "gres")) is not None and not gres_ok(str(g)):
        bad("gres", g, "name[:type][:count], e.g. gpu:1 or gpu:NVIDIAA40:1")
    for key in ("account", "qos"):
        if (v := _value(cluster, key)) is not None and not _NAME.match(str(v)):
            bad(key, v, f"a {key} name (see `sacctmgr show assoc user=$USER`)")
    if (c := _value(cluster, "constraint")) is not None and not _CONSTRAINT.match(str(c)):
        bad("constraint", c, "node features joined by & or |, e.g. a40&ib")
    for key in ("cpus_per_task", "array_parallelism", "max_array_size", "nodes", "tasks_per_node", "gpus_per_node",
                "rendezvous_timeout_s"):
        if (v := _value(cluster, key)) is not None and _positive_int(v) is None:
            bad(key, v, "a whole number >= 1")
    if (w := _value(cluster, "wait_timeout_s")) is not None and _positive_int(w) is None:
        bad("wait_timeout_s", w, "whole seconds >= 1, or null to wait until every job has ended")
    if (p := _value(cluster, "poll_interval_s")) is not None and _positive_int(p) is None:
        bad("poll_interval_s", p, "whole seconds >= 1 (the longest wait between two looks at Slurm)")
    if (d := _value(cluster, "signal_delay_s")) is not None and (_positive_int(d) is None or int(d) > 65535):
        bad("signal_delay_s", d, "whole seconds between 1 and 65535")


# The profile checks ask quick questions; one Slurm cannot answer in this long is left unchecked.
_QUERY_TIMEOUT_S = 30


# sinfo's format letters for what a node offers, and the names ``_nodes`` reads them by.
_NODE_FIELDS = {"name": "%N", "cpus": "%c", "mem": "%m", "gres": "%G", "features": "%f"}


def _nodes(partition: str) -> list[dict] | None:
    out = run_slurm(["sinfo", "-h", "-N", "-p", partition, "-o", "|".join(_NODE_FIELDS.values())],
                    _QUERY_TIMEOUT_S).answer()
    if out is None:
        return None
    return [{"name": node["name"], "cpus": int(node["cpus"].rstrip("+") or 0),
             "mem_mb": int(node["mem"].rstrip("+") or 0), "gres": "" if node["gres"] == "(null)" else node["gres"],
             "features": set() if node["features"] == "(null)" else set(node["features"].split(","))}
            for node in pipe_records(out, tuple(_NODE_FIELDS))]


def _gres_items(text: str) -> list[tuple[str, str | None, int]]:
    """``gpu:a40:4(S:0-1),shard:2`` -> ``[("gpu", "a40", 4), ("shard", None, 2)]`` (count 1 if absent)."""
    items = []
    for item in re.sub(r"\(.*?\)", "", text).split(","):
        parts = [p for p in item.split(":") if p]
        if not parts:
            continue
        count = int(parts.pop()) if len(parts) > 1 and parts[-1].isdigit() else 1
        items.append((parts[0], parts[1] if len(parts) > 1 else None, count))
    return items


def _gres_fits(asked: str, offered: str) -> bool:
    """Does a node's gres (``gpu:a40:4(S:0-1)``) hold every item of ``asked`` (``gpu:1``, ``gpu:a40:2``)?"""
    have: dict[tuple[str, str | None], int] = {}
    for name, kind, count in _gres_items(offered):
        have[(name, None)] = have.get((name, None), 0) + count
        if kind:
            have[(name, kind)] = have.get((name, kind), 0) + count
    return all(have.get((name, kind), 0) >= count for name, kind, count in _gres_items(asked))


def _features_fit(expression: str, features: set[str]) -> bool:
    """Simple feature expressions: ``a&b`` (all), ``a|b`` (any); other forms are left to sbatch."""
    if any(c in expression for c in "[]()*:"):
        return True
    return any(all(f in features for f in conj.split("&")) for conj in expression.replace(",", "&").split("|"))


def check_against_cluster(cluster: DictConfig) -> None:
    """One-line ``PreflightError`` when the cluster says the profile cannot run; silent where Slurm
    cannot be asked (a dry run on a laptop)."""
    partition = str(cluster.partition)
    reply = run_slurm(["scontrol", "show", "partition", "-o", partition], _QUERY_TIMEOUT_S)
    shown = reply.answer()
    if shown is None:
        if no_controller(reply.error):  # nobody answers: submitting would fail too, and no setting of the profile helps
            raise PreflightError(no_controller_line(reply.error))
        partitions = run_slurm(["sinfo", "-h", "-o", "%P"], _QUERY_TIMEOUT_S).answer()
        if partitions is not None:  # Slurm answers, the partition is not there
            known = sorted({p.rstrip("*") for p in partitions.split()})
            raise PreflightError(f"cluster.partition={partition!r} does not exist on this cluster; "
                                 f"use one of {', '.join(known)} ({_PROFILE})")
        return
    fields = dict(f.split("=", 1) for f in shown.split() if "=" in f)
    if (t := _value(cluster, "time")) is not None and (limit := limit_minutes(fields.get("MaxTime", "UNLIMITED"))) \
            is not None and (asked := limit_minutes(t)) is not None and asked > limit:
        raise PreflightError(f"cluster.time={t} exceeds partition {partition}'s limit {fields['MaxTime']}; "
                             f"ask for at most that ({_PROFILE})")
    nodes = _nodes(partition) or []
    wanted, per_node = allocation_shape(cluster)
    if nodes:
        checks = []
        if (m := _value(cluster, "mem")) is not None and mem_mb(m) > 0:
            checks.append(("mem", m, lambda n, m=m: n["mem_mb"] >= mem_mb(m), f"{max(n['mem_mb'] for n in nodes)}M"))
        if (c := _value(cluster, "cpus_per_task")) is not None:  # per task, and a node holds tasks_per_node of them
            checks.append(("cpus_per_task", c, lambda n, c=c: n["cpus"] >= int(c) * per_node,
                           str(max(n["cpus"] for n in nodes) // per_node)))
        if (g := _value(cluster, "gpus_per_node")) is not None:
            checks.append(("gpus_per_node", g, lambda n, g=g: _gres_fits(f"gpu:{g}", n["gres"]),
                           " or ".join(sorted({n["gres"] for n in nodes if n["gres"]})) or "none"))
        if (g := _value(cluster, "gres")) is not None:
            offered = sorted({n["gres"] for n in nodes if n["gres"]}) or ["none"]
            checks.append(("gres", g, lambda n, g=g: _gres_fits(str(g), n["gres"]), " or ".join(offered)))
        if (f := _value(cluster, "constraint")) is not None:
            offered = sorted({x for n in nodes for x in n["features"]}) or ["none"]
            checks.append(("constraint", f, lambda n, f=f: _features_fit(str(f), n["features"]), ", ".join(offered)))
        for key, value, fits, best in checks:
            if not any(fits(n) for n in nodes):
                raise PreflightError(f"cluster.{key}={value} fits no node of partition {partition} "
                                     f"(largest/available there: {best}); change cluster.{key} or the partition")
        names = {n["name"] for n in nodes}
        fitting = {n["name"] for n in nodes if all(fits(n) for _, _, fits, _ in checks)}
        if wanted > len(names):
            raise PreflightError(f"cluster.nodes={wanted} is more than partition {partition} has ({len(names)} "
                                 f"node(s)); set cluster.nodes<={len(names)} or choose another partition")
        if wanted > len(fitting):
            raise PreflightError(f"cluster.nodes={wanted} but only {len(fitting)} node(s) of partition {partition} "
                                 "hold what each node is asked for (CPUs x tasks_per_node, mem, gres, constraint); "
                                 f"set cluster.nodes<={len(fitting)} or ask for less per node")
    _check_account_and_qos(cluster)


def _partition_fields(partition: str) -> dict[str, str] | None:
    """``scontrol show partition -o``'s fields of ``partition``; None where Slurm cannot be asked."""
    shown = run_slurm(["scontrol", "show", "partition", "-o", partition], _QUERY_TIMEOUT_S).answer()
    return None if shown is None else dict(f.split("=", 1) for f in shown.split() if "=" in f)


def _gpus_asked(cluster: DictConfig) -> int | None:
    """GPUs per task the profile asks for (its gres's gpu count, or gpus_per_node over the node's tasks)."""
    if (g := _value(cluster, "gres")) is not None:
        count = sum(n for name, _, n in _gres_items(str(g)) if name == "gpu")
        if count:
            return count
    if (g := _value(cluster, "gpus_per_node")) is not None:
        return max(1, int(g) // allocation_shape(cluster)[1])
    return None


def job_limits(cluster: DictConfig, workload: DictConfig, dry_run: bool) -> Limits:
    """What a task of the profile gets, from the profile itself and, when submitting, from Slurm: ``cluster.mem``
    (0 or unset: a whole node's memory, or the partition's default, by ``sinfo``/``scontrol``), the GPU model
    (``cluster.gpu_model``, the gres type, or the partition's one GPU type) and its memory, ``cluster.time``
    (unset: the partition's DefaultTime, else its MaxTime)."""
    partition = str(cluster.get("partition"))
    ask = not dry_run
    fields = _partition_fields(partition) if ask else None
    nodes = (_nodes(partition) or []) if ask else []
    per_node = allocation_shape(cluster)[1]
    memory, memory_from = None, ""
    mem = _value(cluster, "mem")
    if mem is not None and mem_mb(mem) > 0:
        memory, memory_from = mem_mb(mem) * 2**20, f"cluster.mem={mem}"
    elif nodes:
        largest = max(n["mem_mb"] for n in nodes) * 2**20
        per_cpu = _positive_int((fields or {}).get("DefMemPerCPU", ""))
        per_node_default = _positive_int((fields or {}).get("DefMemPerNode", ""))
        if mem is None and per_cpu:
            memory = per_cpu * int(cluster.cpus_per_task) * per_node * 2**20
            memory_from = f"cluster.mem unset: partition {partition}'s DefMemPerCPU={per_cpu}M x the node's CPUs"
        elif mem is None and per_node_default:
            memory, memory_from = per_node_default * 2**20, f"cluster.mem unset: partition {partition}'s DefMemPerNode"
        else:
            memory = largest
            said = "cluster.mem=0" if mem is not None else "cluster.mem unset"
            memory_from = f"{said}: a whole node of partition {partition}, at most {largest / 2**30:.1f} GiB (sinfo)"
    gpu = gpu_name(_value(cluster, "gpu_model"))
    gres = _value(cluster, "gres")
    gres_types = {kind for name, kind, _ in _gres_items(str(gres)) if name == "gpu" and kind} if gres else set()
    gpu_from = f"cluster.gpu_model={cluster.get('gpu_model')}" if gpu else ""
    if gpu is None and len(gres_types) == 1:
        (kind,) = gres_types
        gpu, gpu_from = gpu_name(kind), f"cluster.gres={gres}"
    offered = {kind for n in nodes for name, kind, _ in _gres_items(n["gres"]) if name == "gpu" and kind}
    if gpu is None and len(offered) == 1 and int(workload.gpus_per_job) > 0:
        (kind,) = offered
        gpu, gpu_from = gpu_name(kind), f"partition {partition}'s GPUs ({kind}, sinfo)"
    gpu_memory = GPU_MEMORY_GIB[gpu] * GIB if gpu else None
    if gpu and not gpu_from.startswith("cluster.gpu_model"):
        gpu_from = f"{gpu_from} ({gpu})"
    elif gpu is None and int(workload.gpus_per_job) > 0:
        gpu_from = "GPU memory not checked: name the GPU in cluster.gpu_model (A40, H100, ...)"
    time_s, time_from = None, ""
    if (t := _value(cluster, "time")) is not None:
        time_s, time_from = limit_minutes(t) * 60.0, f"cluster.time={t}"
    elif fields:
        for key in ("DefaultTime", "MaxTime"):
            value = fields.get(key, "NONE")
            if value.upper() not in ("NONE", "UNLIMITED", "INFINITE"):
                time_s, time_from = limit_minutes(value) * 60.0, f"cluster.time unset: partition {partition}'s {key}={value}"
                break
    return Limits(node_memory=memory, node_memory_from=memory_from, tasks_per_node=per_node, gpu_model=gpu,
                  gpu_memory=gpu_memory, gpu_memory_from=gpu_from, gpus=_gpus_asked(cluster), time_s=time_s,
                  time_from=time_from, signal_delay_s=float(cluster.get("signal_delay_s") or 0),
                  requeue=bool(cluster.get("requeue", True)))


def _check_account_and_qos(cluster: DictConfig) -> None:
    account, qos = _value(cluster, "account"), _value(cluster, "qos")
    if account is None and qos is None:
        return
    fields = ("account", "qos")
    assoc = run_slurm(["sacctmgr", "-n", "-P", "show", "assoc", f"user={getpass.getuser()}", "format=" + ",".join(fields)],
                      _QUERY_TIMEOUT_S).answer()
    if not assoc or not assoc.strip():
        return  # no accounting database here: nothing to check against
    rows = list(pipe_records(assoc, fields))
    accounts = {row["account"] for row in rows}
    allowed_qos = {q for row in rows for q in row["qos"].split(",") if q}
    if account is not None and str(account) not in accounts:
        raise PreflightError(f"cluster.account={account!r} is not one of your Slurm accounts "
                             f"({', '.join(sorted(accounts))}); set cluster.account to one of them or null")
    if qos is not None and allowed_qos and str(qos) not in allowed_qos:
        raise PreflightError(f"cluster.qos={qos!r} is not a QOS you may use ({', '.join(sorted(allowed_qos))}); "
                             "set cluster.qos to one of them or null")


# sbatch's refusal (a fragment of its error) -> the profile key to change.
_REFUSALS = (
    ("partition", "cluster.partition"), ("account", "cluster.account"), ("qos", "cluster.qos"),
    ("gres", "cluster.gres"), ("generic resource", "cluster.gres"), ("memory", "cluster.mem"),
    ("--time", "cluster.time"), ("time limit", "cluster.time"), ("feature", "cluster.constraint"),
    ("processors", "cluster.cpus_per_task"), ("node configuration", "cluster.mem / cpus_per_task / gres / constraint"),
    ("array", "cluster.array_parallelism or the grid size"),
)


def explain_refusal(stderr: str) -> str:
    """sbatch's error output -> one line: what Slurm said, and which profile key to change."""
    lines = [ln.strip() for ln in stderr.splitlines() if "error" in ln.lower()] or \
            [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = "; ".join(dict.fromkeys(ln.removeprefix("sbatch: error: ") for ln in lines)) or "no reason given"
    if no_controller(said):  # not a refusal: nobody answered, and no profile key would change that
        return no_controller_line(said)
    low = said.lower()
    key = next((k for fragment, k in _REFUSALS if fragment in low), "the cluster profile")
    return f"Slurm refused the submission: {said}; change {key} ({_PROFILE}); nothing was submitted"


# Slurm's default MaxArraySize (array indices 0 .. MaxArraySize - 1).
DEFAULT_MAX_ARRAY_SIZE = 1001


def max_array_size(cluster: DictConfig) -> int:
    """Tasks one array may hold: the cluster's ``MaxArraySize`` (``scontrol show config``, Slurm's
    default where it cannot be asked), lowered by the profile's ``max_array_size`` if set."""
    slurm = DEFAULT_MAX_ARRAY_SIZE
    config = run_slurm(["scontrol", "show", "config"], _QUERY_TIMEOUT_S).answer()
    for line in (config or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "MaxArraySize" and value.strip().isdigit():
            slurm = int(value.strip())
    asked = _positive_int(_value(cluster, "max_array_size")) if _value(cluster, "max_array_size") is not None else None
    return min(slurm, asked) if asked else slurm
