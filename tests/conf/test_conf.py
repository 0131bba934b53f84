"""The job files in ``conf/`` are what ``jsspark run`` accepts, and the Databricks job and the
EMR step run that same entry point from the wheel this project builds.

Each job file is loaded as written, then with its places swapped for local ones (every lake
``location`` -> a temporary lake, every server -> a local nats-server holding the origin
streams the examples name): its target stream is created from its config by the engine (so the
server's config rules apply) and its queries are planned (origins found, durable consumers
chosen), without starting Spark.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import jsspark
from jsspark.jobs.republish import check_republish, parse_destination
from jsspark.jobs.runner import Job
from jsspark.jobs.spec import JobSpec, load_job
from jsspark.nats_server import NatsServer

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
PLATFORM_FILES = {"databricks-job.json", "emr-step.json"}
JOB_FILES = sorted(p for p in CONF.iterdir() if p.suffix in (".json", ".yaml", ".yml") and p.name not in PLATFORM_FILES)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
WHEEL = f"{PROJECT['name']}-{PROJECT['version']}-py3-none-any.whl"  # what `pip wheel .` builds (pure Python)

# The origin streams the examples read from servers, as they would be configured there.
SERVER_ORIGINS = {
    "ORDERS": {"subjects": ["orders.>"], "retention": "workqueue"},
    "RETURNS": {"subjects": ["returns.>"]},
}


def test_the_examples_are_all_there() -> None:
    assert {p.name for p in JOB_FILES} == {
        "orders-durable-source.json", "orders-mirror.json", "orders-regions.yaml", "orders-republish.json",
    }
    for path in JOB_FILES:
        assert load_job(path).job_name == path.stem  # checkpoints are named after the job: keep them apart


def raw_file(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())


# -- the job files, placed locally ----------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    import asyncio

    import nats

    srv = NatsServer(store_dir=tmp_path_factory.mktemp("conf-nats")).start()

    async def origins() -> None:
        nc = await nats.connect(srv.url)
        for name, cfg in SERVER_ORIGINS.items():
            await nc.jetstream().add_stream(name=name, **cfg)
        await nc.close()

    try:
        asyncio.run(origins())
        yield srv
    finally:
        srv.close()


def placed(spec: JobSpec, location: str, server_url: str) -> JobSpec:
    """``spec`` with every lake at ``location`` and every server at ``server_url`` (reader
    options and the republish mode kept, credentials dropped)."""
    def where(ep: Any) -> dict[str, Any]:
        if ep.is_lake:
            return {"location": location}
        return {"servers": server_url, **({"options": ep.options} if ep.options else {})}

    raw: dict[str, Any] = {**spec.model_dump(exclude_none=True), "stream": spec.stream, "checkpoint": None,
                           "target": where(spec.target), "origins": {k: where(v) for k, v in spec.origins.items()}}
    if spec.republish_to is not None:
        raw["republish_to"] = {**where(spec.republish_to), "mode": spec.republish_to.mode}
    return JobSpec.model_validate({k: v for k, v in raw.items() if v is not None})


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, server: NatsServer) -> Any:
    """One lake holding every example's target stream, created by the jobs themselves (an
    example that reads another's target, as the mirror reads ORDERS_LAKE, finds it there)."""
    location = str(tmp_path_factory.mktemp("conf-lake"))
    for path in JOB_FILES:
        Job(placed(load_job(path), location, server.url)).prepare()
    return jsspark.connect(location)


@pytest.mark.nats
@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.name)
def test_job_file_creates_its_stream_and_plans_its_queries(path: Path, lake: Any, server: NatsServer) -> None:
    written = load_job(path)
    spec = placed(written, lake.location, server.url)
    stored = lake.stream_info(spec.stream.name).config
    as_written = raw_file(path)["stream"]
    # the engine took the config as written (and filled in the server's defaults around it)
    assert {key: stored.to_json()[key] for key in as_written} == as_written

    plans = Job(spec).plan()
    assert [p.source.name for p in plans] == written.origin_names()
    for plan in plans:
        assert plan.kind == ("mirror" if written.stream.mirror else "source")
        opts = plan.reader_options
        if plan.endpoint.is_lake:
            assert opts["path"] == lake.location and opts["stream"] == plan.source.name
        elif SERVER_ORIGINS[plan.source.name].get("retention") == "workqueue":
            # durable sourcing: a server-managed durable, acked only after each landing commit
            assert (opts["consumerMode"], opts["consumer"]) == ("server", f"jsspark_{spec.stream.name}_"
                                                                          f"{opts['consumer'].rsplit('_', 1)[1]}")
        else:
            assert opts["consumerMode"] == "ordered"
        for key, value in plan.endpoint.options.items():
            assert opts[key] == value  # an origin's "options" reach the reader

    if written.stream.republish is not None:
        assert written.republish_to is not None
        assert check_republish(stored) is not None  # the server's republish rules (cycle, transform)
        parse_destination(written.republish_to.connection_options(), origin_location=lake.location,
                          origin_stream=spec.stream.name)


# -- Databricks and EMR ---------------------------------------------------------------------------
def test_databricks_job_runs_the_console_script_on_a_job_file(capsys: pytest.CaptureFixture[str]) -> None:
    job = json.loads((CONF / "databricks-job.json").read_text())
    (task,) = job["tasks"]
    wheel_task = task["python_wheel_task"]
    assert wheel_task["package_name"] == PROJECT["name"]
    assert wheel_task["entry_point"] in PROJECT["scripts"]
    verb, job_file = wheel_task["parameters"]
    assert verb == "run" and CONF / Path(job_file).name in JOB_FILES
    assert [Path(lib["whl"]).name for lib in task["libraries"]] == [WHEEL]
    clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
    runtime = clusters[task["job_cluster_key"]]["spark_version"]
    assert int(runtime.split(".")[0]) >= 17, runtime  # an example: Spark 4 runtimes have Python data sources
    assert not any(d.startswith("pyspark") for d in PROJECT["dependencies"])  # pip keeps the runtime's own
    assert job["max_concurrent_runs"] == 1  # two runs of one job would share its checkpoints

    module, func = PROJECT["scripts"][wheel_task["entry_point"]].split(":")
    entry = getattr(importlib.import_module(module), func)
    # a wheel task may ignore the entry point's return value: the exit status is raised
    with pytest.raises(SystemExit) as ok:
        entry(["run", "--help"])
    assert ok.value.code == 0 and "JOB" in capsys.readouterr().out  # the verb the task calls
    with pytest.raises(SystemExit) as failed:
        entry(["run", str(CONF / "no-such-job.json")])
    assert failed.value.code == 1 and "cannot read the job file" in capsys.readouterr().err


def test_emr_step_submits_the_entry_module_with_the_wheel() -> None:
    request = json.loads((CONF / "emr-step.json").read_text())  # aws emr add-steps --cli-input-json
    assert request["JobFlowId"]
    (step,) = request["Steps"]
    jar = step["HadoopJarStep"]
    assert jar["Jar"] == "command-runner.jar"
    args = jar["Args"]
    assert args[0] == "spark-submit"
    options, i = {}, 1
    while args[i].startswith("--"):
        options[args[i]] = args[i + 1]
        i += 2
    script, job_arg = args[i:]
    assert Path(options["--py-files"]).name == WHEEL
    assert script.endswith("/jsspark/jobs/submit.py")
    assert (ROOT / "src" / "jsspark" / "jobs" / "submit.py").is_file()
    assert importlib.util.find_spec("jsspark.jobs.submit") is not None
    shipped = Path(options["--files"]).name  # localised next to the driver: the job file by name
    assert job_arg == shipped and CONF / shipped in JOB_FILES


def test_emr_step_is_the_request_the_readme_sends() -> None:
    """The file is the API's AddJobFlowSteps request, which the AWS CLI's `aws emr add-steps` (a
    customized command taking `--cluster-id` and `--steps` in its own shape) does not read as
    `--cli-input-json`: conf/README sends it with the SDK call, and botocore's model takes it."""
    import boto3  # moto, a test dependency, brings it
    from botocore.stub import Stubber

    rows = (CONF / "README.md").read_text().splitlines()
    row = next(line for line in rows if line.startswith("| `emr-step.json`"))
    assert "add_job_flow_steps(**" in row and "add-steps --cli-input-json" not in row, row
    request = json.loads((CONF / "emr-step.json").read_text())
    emr = boto3.client("emr", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(emr) as stub:  # the request is checked against the model before the stub answers
        stub.add_response("add_job_flow_steps", {"StepIds": ["s-1"]}, request)
        assert emr.add_job_flow_steps(**request) == {"StepIds": ["s-1"]}
