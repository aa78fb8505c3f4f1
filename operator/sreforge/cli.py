"""`sreforge ...`: the command line. Exit codes: 0 passed, 1 failed, 2 error."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sreforge import catalogue, judge, leaderboard, report
from sreforge.api.record import RunRecord
from sreforge.api.scenario import Scenario, ScenarioError
from sreforge.api.verdict import Reason
from sreforge.markdown import write_section
from sreforge.mcp import agent
from sreforge.mcp.server import serve_stdio_proxy
from sreforge.runtime import campaign, handoff, sources
from sreforge.runtime.local import CaseSpec, LocalRun, RunOptions
from sreforge.runtime.process import ProcessError
from sreforge.runtime.session import run_session
from sreforge.scenarios import decoys, discover, fixes, load_scenario

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def repo_root() -> Path:
    """The checkout holding scenarios/ and substrate/ (this file is operator/sreforge/cli.py)."""
    return Path(__file__).resolve().parents[2]


def _resolve_scenario(arg: str) -> Path:
    path = Path(arg)
    if path.exists():
        return path
    named = repo_root() / "scenarios" / arg
    return named if named.exists() else path


def cmd_run(args: argparse.Namespace) -> int:
    try:
        scenario = load_scenario(_resolve_scenario(args.scenario))
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for label, file in (("--fix", args.fix), ("--rca", args.rca)):
        if file is not None and not file.is_file():
            print(f"error: {label} {file}: no such file", file=sys.stderr)
            return EXIT_ERROR
    opts = _options(args, fix=args.fix, agent=args.agent, mcp=args.mcp)
    try:
        run = LocalRun(scenario, repo_root(), opts)
        record = RunRecord.model_validate(run.execute())
    except (ProcessError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(
            "interrupted: the run was recorded Inconclusive and its processes stopped",
            file=sys.stderr,
        )
        return 130
    run_dir = run.dir
    if record.submission.rca:
        judge.judge_run(run_dir)
    try:
        _png, html = report.write_report(run_dir)
        print(f"report   {html}", file=sys.stderr)
    except (OSError, ValueError) as exc:  # the verdict stands without its picture
        print(f"warning: report not written: {exc}", file=sys.stderr)
    _print_summary(record, run_dir)
    if record.passed:
        return EXIT_PASSED
    if record.reason in (Reason.INCONCLUSIVE, Reason.ALERT_NEVER_FIRED):
        return EXIT_ERROR
    return EXIT_FAILED


def cmd_mcp(args: argparse.Namespace) -> int:
    url = args.connect
    if url is None:
        try:
            url = handoff.read_url(args.run_dir)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ERROR
    if not str(url).startswith(("http://", "https://")):
        print(f"error: --connect {url}: not an http(s) URL", file=sys.stderr)
        return EXIT_ERROR
    try:
        asyncio.run(serve_stdio_proxy(url))
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # the client sees the bridge end; say why on stderr
        print(f"error: the MCP bridge to the run ended: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def _print_summary(record: RunRecord, run_dir: Path) -> None:
    print(f"\nrun      {record.run_id}")
    print(
        f"verdict  {'PASSED' if record.passed else 'FAILED'}  reason={record.reason}  "
        f"score={record.score:.3f} (pass bar {record.pass_threshold})"
    )
    print(f"message  {record.message}")
    print(f"{'signal':<16} {'value':>8} {'credit':>7} {'weight':>7}  detail")
    for name, s in record.signals.items():
        value = s.value
        shown = f"{value:.1f}s" if isinstance(value, float) else str(value)
        print(f"{name:<16} {shown:>8} {s.credit:>7.2f} {s.weight:>7.2f}  {s.detail}")
    print(f"record   {run_dir / 'record.json'}")


def cmd_sources(args: argparse.Namespace) -> int:
    """`sreforge sources fetch|list|context`: the third-party services under test (source.toml)."""
    try:
        found = sources.discover(args.root)
        if args.names:
            unknown = sorted(set(args.names) - {spec.name for _, spec in found})
            if unknown:
                known = ", ".join(spec.name for _, spec in found) or "none"
                print(
                    f"error: no source named {', '.join(unknown)} (known: {known})", file=sys.stderr
                )
                return EXIT_ERROR
            found = [(d, spec) for d, spec in found if spec.name in args.names]
        if args.sources_command == "context":
            if len(found) != 1 or args.dest is None:
                print("error: sources context takes one source name and --dest", file=sys.stderr)
                return EXIT_ERROR
            sources.build_context(found[0][0], args.dest)
            print(f"{found[0][1].label}: build context at {args.dest}")
            return 0
        for directory, spec in found:
            where = sources.Fetched(spec)
            if args.sources_command == "fetch":
                where = sources.fetch(directory)
            state = (
                "fetched" if where.ready((directory / spec.requirements).read_text()) else "missing"
            )
            print(f"{spec.name:<12} {spec.version:<10} {spec.license:<12} {state:<8} {where.home}")
    except sources.SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


def cmd_scenarios_list(args: argparse.Namespace) -> int:
    try:
        scenarios = discover(args.root)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.markdown:
        try:  # both tables before either is written: a bad decoy header leaves the file as it was
            classes = catalogue.classes_table(scenarios)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        write_section(
            args.markdown, "## Catalogue", catalogue.difficulty_table(scenarios), catalogue.PREAMBLE
        )
        write_section(args.markdown, "## Decoy classes", classes, catalogue.PREAMBLE)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": s.name,
                        "family": s.family,
                        "alert": s.target_alert,
                        "title": s.title,
                        "fixes": len(fixes(s)),
                        "decoys": len(decoys(s)),
                        "substrate": Path(s.service.source).name,
                        "category": s.history.category if s.history else None,
                        "signals": s.difficulty.signals if s.difficulty else [],
                    }
                    for s in scenarios
                ],
                indent=2,
            )
        )
        return 0
    nw = max([4, *(len(s.name) for s in scenarios)])
    aw = max([5, *(len(s.target_alert) for s in scenarios)])
    print(
        f"{'NAME':<{nw}} {'FAMILY':<14} {'SUBSTRATE':<10} {'ALERT':<{aw}} {'FIXES':>5} "
        f"{'DECOYS':>6}  CATEGORY"
    )
    for s in scenarios:
        category = s.history.category if s.history else "-"
        print(
            f"{s.name:<{nw}} {s.family:<14} {Path(s.service.source).name:<10} "
            f"{s.target_alert:<{aw}} {len(fixes(s)):>5} {len(decoys(s)):>6}  {category}"
        )
    return 0


def _validate_command(args: argparse.Namespace, name: str) -> str:
    """The command that reproduces one scenario's section of the table."""
    command = f"sreforge scenarios validate {name}" + (" --fast" if args.fast else "")
    command += "".join(f" --only {label}" for label in args.only or ())
    if args.sustain_seconds:
        command += f" --sustain-seconds {args.sustain_seconds}"
    if args.soak_seconds is not None:
        command += " --soak-seconds {:g}:{:g}".format(*args.soak_seconds)
    if args.control_seconds is not None:
        command += f" --control-seconds {args.control_seconds}"
    return command


def _control_seconds(args: argparse.Namespace, scenario: Scenario) -> int:
    """The control window of a validation: as given, else as long as a fix is held."""
    if args.control_seconds is not None:
        return int(args.control_seconds)
    return catalogue.held_seconds(scenario, args.sustain_seconds, args.soak_seconds)


def soak_range(text: str) -> tuple[float, float]:
    """`--soak-seconds LOW:HIGH` (or one number: a soak of exactly that length)."""
    low, _, high = text.partition(":")
    try:
        pair = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not LOW:HIGH seconds: {text!r}") from None
    if not 0 <= pair[0] <= pair[1] <= 3600:
        raise argparse.ArgumentTypeError(f"want 0 <= LOW <= HIGH <= 3600 seconds, got {text!r}")
    return pair


def _quiet_or_verbose(args: argparse.Namespace) -> Callable[[str], None]:
    if args.verbose:
        return lambda line: print(line, file=sys.stderr)
    return lambda _line: None


def cmd_scenarios_validate(args: argparse.Namespace) -> int:
    """Each scenario's cases on one warm session: the control window, then the fixes, the
    empty patch and the decoys, each graded and restored in turn."""
    try:
        scenarios = (
            [load_scenario(_resolve_scenario(n)) for n in args.names]
            if args.names
            else discover(args.root)
        )
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.runtime == "kube":
        if args.only:
            print("error: --only grades local cases; --runtime kube grades all", file=sys.stderr)
            return EXIT_ERROR
        return _validate_on_kube(args, scenarios)
    rows: list[dict[str, object]] = []
    print(
        f"{'SCENARIO':<32} {'PATCH':<36} {'EXPECTED':<8} {'GOT':<6} {'SCORE':>6} "
        f"{'REASON':<18} {'FIRED':>6} {'SECONDS':>7}  FAILING SIGNALS"
    )
    for scenario in scenarios:
        todo = [c for c in catalogue.cases(scenario) if c.fast or not args.fast]
        if args.only:
            todo = [c for c in todo if c.label in args.only or Path(c.label).stem in args.only]
            if not todo:
                print(
                    f"error: --only {' '.join(args.only)}: no such case of {scenario.name} "
                    f"(its cases: {', '.join(c.label for c in catalogue.cases(scenario))})",
                    file=sys.stderr,
                )
                return EXIT_ERROR
        specs = [
            CaseSpec(c.label, fix=c.patch_file(args.runs_dir / ".validate" / scenario.name))
            for c in todo
        ]
        opts = RunOptions(
            runs_dir=args.runs_dir,
            sustain_seconds=args.sustain_seconds,
            soak_seconds=args.soak_seconds,
            control_seconds=_control_seconds(args, scenario) if todo[0].control else 0,
            live=False,
            progress=_quiet_or_verbose(args),
        )
        print(f"{scenario.name}: {len(todo)} cases on one warm session ...", file=sys.stderr)
        try:
            session = run_session(scenario, repo_root(), opts, specs)
        except KeyboardInterrupt:
            print(f"interrupted at {scenario.name}: no table written", file=sys.stderr)
            return 130
        except (ProcessError, ValueError) as exc:
            mine = [catalogue.error_row(c, str(exc), 0.0) for c in todo]
        else:
            mine = [
                catalogue.row(
                    case,
                    record.model_dump(mode="json", by_alias=True),
                    record.wall_time_seconds.get("total", 0.0),
                )
                for case, record in zip(todo, session.records, strict=False)
            ]
            mine += [catalogue.error_row(c, "not run", 0.0) for c in todo[len(mine) :]]
        for row in mine:
            fired = "-" if row["fireSeconds"] is None else f"{row['fireSeconds']}s"
            print(
                f"{row['scenario']:<32} {row['patch']:<36} {row['expected']:<8} "
                f"{row['got']:<6} {row['score']:>6.3f} {row['reason']:<18} {fired:>6} "
                f"{row['seconds']:>7}  {row['failing']}"
                + (f"\n  MISMATCH: {row['mismatch']}" if row["mismatch"] else ""),
                flush=True,
            )
        rows += mine
        total = (
            session.ended - session.began if not any(r["got"] == "error" for r in mine) else None
        )
        if args.markdown:  # each scenario's section as soon as it is done
            catalogue.write_markdown(
                args.markdown,
                mine,
                _validate_command(args, scenario.name),
                catalogue.when(),
                total_seconds=total,
                added=bool(args.only),
            )
    mismatches = [r for r in rows if r["mismatch"]]
    print(f"\n{len(rows)} cases, {len(mismatches)} mismatches")
    return EXIT_FAILED if mismatches else EXIT_PASSED


def cmd_scenarios_target(args: argparse.Namespace) -> int:
    """The scenario's service, healthy, as Kubernetes manifests on stdout: what its
    incident.yaml expects to find before it is applied (the Deployment its
    targetDeployment names, its Service, and the user's own database and upstreams)."""
    import yaml  # noqa: PLC0415 (only this command writes YAML)

    from sreforge.runtime.kube import validate  # noqa: PLC0415 (the kubernetes client)
    from sreforge.runtime.kube.config import OperatorConfig  # noqa: PLC0415

    try:
        scenario = load_scenario(_resolve_scenario(args.name))
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if "kube" not in scenario.runtimes:
        print(
            f"error: {scenario.name}: runtimes = {list(scenario.runtimes)} in scenario.toml: "
            "it has no images for Kubernetes",
            file=sys.stderr,
        )
        return EXIT_ERROR
    ns = args.namespace or validate.shipped_namespace(scenario)
    objects = validate.healthy_target(scenario, ns, OperatorConfig.from_env())

    class Plain(yaml.SafeDumper):  # the labels a Deployment repeats, written out each time
        def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 (always)
            return True

    sys.stdout.write(yaml.dump_all(objects, Dumper=Plain, sort_keys=False))
    return EXIT_PASSED


def _validate_on_kube(args: argparse.Namespace, scenarios: list[Scenario]) -> int:
    """Each scenario's cases (--fast: the empty patch and the first fix), graded by the
    operator of the cluster $KUBECONFIG (or --kubeconfig) names, each scenario in a
    namespace of its own."""
    from sreforge.runtime.kube import validate  # noqa: PLC0415 (the kubernetes client)
    from sreforge.runtime.kube.client import Kube  # noqa: PLC0415
    from sreforge.runtime.kube.config import OperatorConfig  # noqa: PLC0415

    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    kube = Kube()
    cfg = OperatorConfig.from_env()
    rows: list[dict[str, object]] = []
    local_only = [s.name for s in scenarios if "kube" not in s.runtimes]
    if local_only:
        print(
            f"error: {', '.join(local_only)}: runtimes = {['local']} in scenario.toml "
            "(no images for the real node yet): validate it locally",
            file=sys.stderr,
        )
        return EXIT_ERROR
    for scenario in scenarios:
        ns = f"validate-{scenario.name}"[:63].rstrip("-")
        command = (
            f"sreforge scenarios validate {scenario.name} --runtime kube"
            f" --sustain-seconds {args.sustain_seconds or 30}" + (" --fast" if args.fast else "")
        )
        if args.control_seconds is not None:
            command += f" --control-seconds {args.control_seconds}"
        try:
            mine = validate.validate_scenario(
                kube,
                scenario,
                cfg,
                args.prometheus_url,
                ns,
                sustain_seconds=args.sustain_seconds or 30,
                fast=args.fast,
                control_seconds=args.control_seconds,
                say=lambda m: print(m, file=sys.stderr, flush=True),
            )
        except Exception as exc:  # one scenario's failure is its rows' error
            mine = [
                catalogue.error_row(c, str(exc), 0.0)
                for c in validate.kube_cases(scenario, fast=args.fast, control=False)
            ]
        for row in mine:
            print(
                f"{row['scenario']:<32} {row['patch']:<36} {row['expected']:<8} "
                f"{row['got']:<6} {row['score']:>6.3f} {row['reason']}"
                + (f"\n  MISMATCH: {row['mismatch']}" if row["mismatch"] else ""),
                flush=True,
            )
        rows += mine
        if args.markdown:
            validate.write_rows(args.markdown, mine, command)
    mismatches = [r for r in rows if r["mismatch"]]
    print(f"\n{len(rows)} cases on Kubernetes, {len(mismatches)} mismatches")
    return EXIT_FAILED if mismatches else EXIT_PASSED


def cmd_campaign(args: argparse.Namespace) -> int:
    """Submitters x trials on warm sessions; prints pass@1, pass^k, 95% intervals."""
    try:
        scenarios = [load_scenario(_resolve_scenario(n)) for n in args.scenarios]
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    cid = campaign.new_campaign_id()
    try:
        subs = [campaign.patch_submitter(f, scenarios, args.runs_dir / cid) for f in args.fix] + [
            campaign.Submitter(a, agent=a) for a in args.agent
        ]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not subs:
        print("error: give at least one --fix PATCH or --agent CMD", file=sys.stderr)
        return EXIT_ERROR
    idle = [s.name for s in scenarios if not any(x.applies_to(s) for x in subs)]
    if idle:
        print(f"error: no submitter applies to {', '.join(idle)}", file=sys.stderr)
        return EXIT_ERROR
    opts = _options(
        args,
        rearm_timeout_seconds=args.rearm_timeout,
        live=False,
        progress=_quiet_or_verbose(args),
    )
    print(f"campaign {cid}: {len(subs)} submitter(s) x {args.trials} trial(s)", file=sys.stderr)
    try:
        result = campaign.run_campaign(
            scenarios,
            subs,
            args.trials,
            opts,
            repo_root(),
            campaign_id=cid,
            on_session=lambda c: print(f"  {c.sessions[-1]}: done", file=sys.stderr),
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: campaign.json has the sessions that finished", file=sys.stderr)
        return 130
    print(campaign.table(result))
    print(f"\ncampaign {args.runs_dir / cid / 'campaign.json'}")
    return EXIT_PASSED


def cmd_operator(args: argparse.Namespace) -> int:
    """Run the kopf operator in this process (sreforge.handlers)."""
    import os  # noqa: PLC0415

    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    if args.scenarios_dir:
        os.environ["SREFORGE_SCENARIOS_DIR"] = str(args.scenarios_dir)
    if args.metrics_port:
        os.environ["SREFORGE_METRICS_PORT"] = str(args.metrics_port)
    from sreforge import handlers  # noqa: PLC0415 (kopf loads only for this command)

    handlers.run_operator(namespaces=args.namespace, liveness=args.liveness, verbose=args.verbose)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """Create a Submission for INCIDENT with the patch (inline) and an optional RCA."""
    import os  # noqa: PLC0415

    from sreforge.api.resources import API_VERSION, MAX_INLINE_PATCH  # noqa: PLC0415

    if args.kubeconfig:
        os.environ["KUBECONFIG"] = str(args.kubeconfig)
    try:
        patch = args.patch.read_text(encoding="utf-8")
        rca = args.rca.read_text(encoding="utf-8") if args.rca else None
    except (OSError, UnicodeDecodeError) as exc:
        print(f"sreforge submit: cannot read the patch or RCA file: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if len(patch.encode()) > MAX_INLINE_PATCH:
        print(
            f"sreforge submit: {args.patch}: larger than {MAX_INLINE_PATCH} bytes", file=sys.stderr
        )
        return EXIT_ERROR
    spec: dict[str, object] = {"incidentRef": {"name": args.incident}, "patch": {"inline": patch}}
    if rca:
        spec["rca"] = rca
    if args.agent_model:
        spec["agentModel"] = args.agent_model
    body = {
        "apiVersion": API_VERSION,
        "kind": "Submission",
        "metadata": {"generateName": f"{args.incident[:50]}-"},
        "spec": spec,
    }
    from sreforge.runtime.kube.client import Kube  # noqa: PLC0415

    try:
        kube = Kube()
        ns = args.namespace or kube.default_namespace()
        made = kube.create_submission(ns, body)
    except Exception as exc:  # the API's refusal or a missing cluster: one clear line
        reason = getattr(exc, "body", None) or exc
        print(f"sreforge submit: the API server refused the Submission: {reason}", file=sys.stderr)
        return EXIT_ERROR
    print(f"submission.sreforge.dev/{made['metadata']['name']} created in namespace {ns}")
    return EXIT_PASSED


def _add_grading_arguments(p: argparse.ArgumentParser) -> None:
    """What `run` and `campaign` share: the agent's setting, the windows, where to write."""
    p.add_argument("--agent-model", help="model under test (the RCA judge must differ)")
    p.add_argument("--agent-timeout", type=int, default=1800, metavar="SECONDS")
    p.add_argument(
        "--agent-share",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="show PATH read-only, at the same path, inside the agent's sandbox (repeatable)",
    )
    p.add_argument(
        "--agent-unsandboxed",
        action="store_true",
        help="run the agent as this user with the whole file system in view (record says so)",
    )
    p.add_argument(
        "--substrate-unconfined",
        action="store_true",
        help="run the service builds, upstreams and Redis as this user, unconfined (not root)",
    )
    p.add_argument("--rca", type=Path, help="a root-cause write-up to judge beside the verdict")
    p.add_argument(
        "--sustain-seconds", type=int, metavar="N", help="override the scenario's sustained window"
    )
    p.add_argument(
        "--soak-seconds",
        type=soak_range,
        metavar="LOW:HIGH",
        help="override the range the hidden soak after the window is drawn from (0:0: none)",
    )
    p.add_argument(
        "--control-seconds",
        type=int,
        default=0,
        metavar="N",
        help="observe the healthy build under load first (control run)",
    )
    p.add_argument("--runs-dir", type=Path, default=Path("runs"))


def _options(args: argparse.Namespace, **more: Any) -> RunOptions:
    """RunOptions from the arguments `_add_grading_arguments` added."""
    return RunOptions(
        runs_dir=args.runs_dir,
        agent_model=args.agent_model,
        rca=args.rca,
        sustain_seconds=args.sustain_seconds,
        soak_seconds=args.soak_seconds,
        control_seconds=args.control_seconds,
        agent_timeout_seconds=args.agent_timeout,
        agent_shares=args.agent_share,
        agent_unsandboxed=args.agent_unsandboxed,
        substrate_unconfined=args.substrate_unconfined,
        **more,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sreforge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="one graded closed-loop run of a scenario on this machine")
    run.add_argument("scenario", help="scenario directory or name under scenarios/")
    who = run.add_mutually_exclusive_group(required=True)
    who.add_argument("--fix", type=Path, help="a unified diff against the workspace")
    who.add_argument("--agent", help="command run in the workspace; its edits are the patch")
    who.add_argument(
        "--mcp",
        action="store_true",
        help="wait for a submission through the run's MCP server (an agent started by hand); "
        "prints its URL and a client config on stdout",
    )
    _add_grading_arguments(run)
    run.set_defaults(func=cmd_run)

    mc = sub.add_parser(
        "mcp", help="serve a run's incident tools over stdio (a bridge to its MCP URL)"
    )
    target = mc.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "run_dir", nargs="?", type=Path, help="a run's (or warm-session case's) directory"
    )
    target.add_argument(
        "--connect",
        metavar="URL",
        help="the run's MCP URL (SREFORGE_MCP_URL, or printed by `sreforge run --mcp`)",
    )
    mc.set_defaults(func=cmd_mcp)

    ag = sub.add_parser(
        "agent", help="the reference agent: a chat-completions model through a run's MCP tools"
    )
    agent.add_arguments(ag)
    ag.set_defaults(func=agent.cli)

    scen = sub.add_parser("scenarios", help="the scenario catalogue")
    scen_sub = scen.add_subparsers(dest="scenarios_command", required=True)
    ls = scen_sub.add_parser("list", help="list scenarios")
    ls.add_argument("--root", type=Path, default=repo_root() / "scenarios")
    ls.add_argument("--json", action="store_true")
    ls.add_argument(
        "--markdown",
        type=Path,
        help="also write the catalogue's difficulty notes into this file (## Catalogue)",
    )
    ls.set_defaults(func=cmd_scenarios_list)

    val = scen_sub.add_parser("validate", help="every fix must pass, every decoy must fail")
    val.add_argument("names", nargs="*", help="scenario names or directories (default: all)")
    val.add_argument("--root", type=Path, default=repo_root() / "scenarios")
    val.add_argument("--runs-dir", type=Path, default=Path("runs"))
    val.add_argument("--sustain-seconds", type=int, metavar="N")
    val.add_argument("--soak-seconds", type=soak_range, metavar="LOW:HIGH")
    val.add_argument(
        "--control-seconds",
        type=int,
        default=None,
        metavar="N",
        help="healthy-build control window before the first case of a scenario (default: "
        "the sustained window plus the soak's upper bound: the healthy build must hold "
        "through what a fix is held to)",
    )
    val.add_argument("--markdown", type=Path, help="write the table to this file")
    val.add_argument(
        "--fast", action="store_true", help="only the first fix (with control) and the empty patch"
    )
    val.add_argument(
        "--only",
        action="append",
        metavar="PATCH",
        help="only this case (e.g. decoys/x.patch, or x), repeatable: cases added since the "
        "scenario's validation; --markdown writes them to a section of their own, which the "
        "next full validation of the scenario replaces",
    )
    val.add_argument("-v", "--verbose", action="store_true", help="progress lines of each run")
    val.add_argument(
        "--runtime",
        choices=("local", "kube"),
        default="local",
        help="kube: the cases graded by the operator of a cluster, the empty patch first, "
        "then the decoys and the fixes (with --fast: the empty patch and the first fix)",
    )
    val.add_argument("--kubeconfig", type=Path, help="(--runtime kube) the cluster's kubeconfig")
    val.add_argument(
        "--prometheus-url",
        default="http://prometheus.sreforge-system.svc:9090",
        help="(--runtime kube) the Incidents' spec.prometheusURL (the chart's by default)",
    )
    val.set_defaults(func=cmd_scenarios_validate)

    tg = scen_sub.add_parser(
        "target",
        help="the scenario's healthy service as Kubernetes manifests (what its incident.yaml "
        "targets), for kubectl apply -f -",
    )
    tg.add_argument("name", help="a scenario name or directory")
    tg.add_argument(
        "--namespace",
        help="the namespace of the manifests (default: the one the scenario's incident.yaml names)",
    )
    tg.set_defaults(func=cmd_scenarios_target)

    cp = sub.add_parser(
        "campaign", help="submitters x trials on warm sessions: pass@1, pass^k, 95%% intervals"
    )
    cp.add_argument("scenarios", nargs="+", metavar="SCENARIO")
    cp.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="PATCH",
        help="a patch to grade (repeatable); one inside scenarios/NAME/ is graded on NAME "
        "only; `empty` is the empty patch",
    )
    cp.add_argument(
        "--agent", action="append", default=[], metavar="CMD", help="an agent (repeatable)"
    )
    cp.add_argument("--trials", type=int, default=1, metavar="K")
    _add_grading_arguments(cp)
    cp.add_argument(
        "--rearm-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a restored baseline may take to fire again (default: the fire timeout)",
    )
    cp.add_argument("-v", "--verbose", action="store_true", help="progress lines of each case")
    cp.set_defaults(func=cmd_campaign)

    src = sub.add_parser(
        "sources", help="third-party services under test: pinned sdists, fetched, never committed"
    )
    src_sub = src.add_subparsers(dest="sources_command", required=True)
    for name, text in (
        ("fetch", "download, verify (sha256) and unpack each source, with its pinned venv"),
        ("list", "each source and whether it is fetched"),
        ("context", "stage a fetched source's image build context (hack/images.sh)"),
    ):
        one = src_sub.add_parser(name, help=text)
        one.add_argument("names", nargs="*", help="source names (default: all)")
        if name == "context":
            one.add_argument("--dest", type=Path, required=True, help="the context folder")
        one.add_argument("--root", type=Path, default=repo_root(), help="the checkout")
        one.set_defaults(func=cmd_sources)

    rp = sub.add_parser("report", help="write report.html and timeline.png for a run")
    report.add_arguments(rp)
    rp.set_defaults(func=report.cli)

    rs = sub.add_parser("runs", help="the leaderboard: every run in a runs directory")
    leaderboard.add_arguments(rs)
    rs.set_defaults(func=leaderboard.cli)

    op = sub.add_parser("operator", help="run the Kubernetes operator (kopf, sreforge.handlers)")
    op.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG or in-cluster")
    op.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    op.add_argument("--scenarios-dir", type=Path, help="default: $SREFORGE_SCENARIOS_DIR")
    op.add_argument("--liveness", metavar="URL", help="e.g. http://0.0.0.0:8080/healthz")
    op.add_argument(
        "--metrics-port",
        type=int,
        help="serve the operator's metrics on this port's /metrics "
        "(default: $SREFORGE_METRICS_PORT, else none)",
    )
    op.add_argument("-v", "--verbose", action="store_true")
    op.set_defaults(func=cmd_operator)

    sm = sub.add_parser("submit", help="create a Submission (an agent's fix) for an Incident")
    sm.add_argument("incident", help="the Incident's name")
    sm.add_argument("--patch", type=Path, required=True, help="a unified diff")
    sm.add_argument("--rca", type=Path, help="a root-cause write-up")
    sm.add_argument("--agent-model", help="the model under test")
    sm.add_argument("-n", "--namespace", help="default: the kubeconfig context's namespace")
    sm.add_argument("--kubeconfig", type=Path)
    sm.set_defaults(func=cmd_submit)

    jd = sub.add_parser("judge", help="grade a run's root-cause write-up (diagnosis.json)")
    judge.add_arguments(jd)
    jd.set_defaults(func=judge.cli)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
