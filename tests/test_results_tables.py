"""The results tables of README.md, docs/benchmarks.md and the systems' pages are generated
from the records in results/ (tools/results_tables.py): they match the records, and follow
them when one changes."""

from __future__ import annotations

import copy
import datetime
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("results_tables", ROOT / "tools" / "results_tables.py")
assert _spec is not None and _spec.loader is not None
tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tables)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return tables.load_records()


def test_every_record_says_what_ran_where_when_and_on_which_code(records):
    assert records, "results/ holds no records"
    for record in records:
        assert record["command"].split()[0] in ("pglab", "python"), record["name"]
        assert datetime.datetime.fromisoformat(record["date"]).tzinfo is not None, record["name"]
        assert len(record["commit"].split("+")[0]) == 40, record["name"]
        assert isinstance(record["machine"]["cores"], int) and record["machine"]["torch"], record["name"]
        assert (ROOT / "docs" / record["docs"].split("#")[0]).is_file(), record["name"]


def test_the_generated_tables_are_up_to_date(records):
    for name, (text, new) in tables.regenerated(records).items():
        assert text == new, f"{name} does not match results/: run python tools/results_tables.py"


def test_a_changed_record_changes_the_tables(records):
    changed = copy.deepcopy(records)
    fd = next(record for record in changed if record["name"] == "ghm-fd-optimum")
    fd["figures"]["rows"][0]["value"] = 9.87654
    readme, benchmarks = tables.readme_table(changed), tables.benchmarks_section(changed)
    assert "9.8765" in readme and "9.8765" in benchmarks
    assert readme != tables.readme_table(records) and benchmarks != tables.benchmarks_section(records)
    stale = {name for name, (text, new) in tables.regenerated(changed).items() if text != new}
    assert stale == {"README.md", "docs/benchmarks.md"}  # the throughput table does not show this record
    fd["command"] = "pglab solve ghm --json --nodes 12000"
    assert "--nodes 12000" in tables.readme_table(changed)


def test_the_readme_has_one_row_per_system_with_results_and_no_speed_or_study_figures(records):
    rows = [line for line in tables.readme_table(records).splitlines()[2:]]
    systems = [row.split("](")[0].removeprefix("| [") for row in rows]
    with_results = {record["system"] for record in records if record["kind"] == "result"}
    assert systems == [system for system in tables.SYSTEMS if system in with_results]
    for record in records:
        if record["kind"] in ("benchmark", "study"):
            assert record["command"] not in tables.readme_table(records)
            assert record["command"] in tables.benchmarks_section(records)


def test_a_record_that_cannot_be_rendered_is_refused_naming_it(records):
    broken = copy.deepcopy(next(record for record in records if record["name"] == "ghm-fd-optimum"))
    broken["headline"] = "V* = {rows[0][no_such_figure]:.4f}"
    with pytest.raises(tables.RecordError, match=r"^x\.json: headline refers to a figure .*no_such_figure"):
        tables.check_record(broken, "x.json")
    for field, value, message in (
        ("system", "Chess", "system must be one of"),
        ("kind", "speed", "kind must be"),
        ("reads", {"flag": "--output"}, "reads must be"),
    ):
        with pytest.raises(tables.RecordError, match=message):
            tables.check_record({**broken, "headline": "", field: value}, "x.json")
    with pytest.raises(tables.RecordError, match=r"x\.json: missing date, commit, machine, wall_s, figures"):
        tables.check_record({field: broken[field] for field in tables.DESCRIBED}, "x.json")
    with pytest.raises(tables.RecordError, match="README.md: no generated section"):
        tables.with_section("# pglab\n", "| table |", "README.md")


def test_record_runs_the_command_and_stores_its_provenance(tmp_path):
    path = tmp_path / "toy.json"
    described = {
        "system": "Forecasting game",
        "title": "a toy",
        "kind": "benchmark",
        "command": """python -c 'import json; print(json.dumps({"rate": 2.5, "rows": [{"x": 7}]}))'""",
        "reads": "stdout",
        "headline": "rate {rate:.2f}, x {rows[0][x]}",
        "docs": "forecast.md",
    }
    path.write_text(json.dumps(described))
    stored = tables.record(path)
    assert stored == json.loads(path.read_text())
    assert stored["figures"] == {"rate": 2.5, "rows": [{"x": 7}]}
    assert tables.headline(stored, "toy.json") == "rate 2.50, x 7"
    assert {field: stored[field] for field in tables.DESCRIBED} == described
    assert stored["machine"]["cores"] > 0 and len(stored["commit"].split("+")[0]) == 40
    path.write_text(json.dumps({**described, "command": "python -c 'import sys; sys.exit(3)'"}))
    with pytest.raises(tables.RecordError, match="exited with 3"):
        tables.record(path)


def test_the_minatar_throughput_table_shows_every_game_and_size_of_its_record(records):
    changed = copy.deepcopy(records)
    throughput = next(record for record in changed if record["name"] == "minatar-throughput")
    summary = throughput["figures"]["summary"]
    table = tables.minatar_throughput_table(changed).splitlines()
    assert len([line for line in table if line.startswith("| ") and "---" not in line]) == 1 + len(summary)
    summary["breakout@4096"]["pglab"]["per_s"] = 2 * summary["breakout@4096"]["gymnax"]["per_s"]
    assert "| breakout | 4,096 |" in tables.minatar_throughput_table(changed)
    assert " 2.00x |" in tables.minatar_throughput_table(changed)
    stale = {name for name, (text, new) in tables.regenerated(changed).items() if text != new}
    assert "docs/a2c.md" in stale
    with pytest.raises(tables.RecordError, match="minatar-throughput.json"):
        tables.minatar_throughput_table([record for record in changed if record is not throughput])


def test_the_stream_comparison_table_has_a_row_per_task_and_point(records):
    changed = copy.deepcopy(records)
    comparison = next(record for record in changed if record["name"] == "stream-ac-vs-reference")
    tasks = comparison["figures"]["tasks"]
    rows = [line for line in tables.stream_comparison_table(changed).splitlines() if line.startswith("| `")]
    assert len(rows) == sum(len(task["points"]) for task in tasks.values())
    task = next(iter(tasks.values()))
    task["points"][0]["pglab"]["mean"] = 123.456
    assert "| 123.46 |" in tables.stream_comparison_table(changed)
    stale = {name for name, (text, new) in tables.regenerated(changed).items() if text != new}
    assert stale == {"docs/a2c.md"}


def test_a_file_with_two_tables_fills_its_sections_in_order():
    text = f"a\n{tables.BEGIN}\nold\n{tables.END}\nb\n{tables.BEGIN}\n{tables.END}\nc\n"
    filled = tables.with_section(text, ["one", "two"], "x.md")
    assert filled == f"a\n{tables.BEGIN}\none\n{tables.END}\nb\n{tables.BEGIN}\ntwo\n{tables.END}\nc\n"
    with pytest.raises(tables.RecordError, match="x.md: no generated section .* for table 3"):
        tables.with_section(text, ["one", "two", "three"], "x.md")


def test_the_zoo_returns_table_follows_its_record(records):
    changed = copy.deepcopy(records)
    zoo = next(record for record in changed if record["name"] == "ppo-zoo-returns")
    swimmer = zoo["figures"]["envs"]["Swimmer-v4"]
    swimmer["pglab"]["mean"], swimmer["difference"], swimmer["pglab_holds"] = 123.4, -195.9, False
    table = tables.zoo_returns_table(changed)
    assert "| Swimmer-v4 | pglab |" in table and "**123.4 ± " in table
    assert "Swimmer-v4 -195.9 (does not hold;" in table
    assert "InvertedDoublePendulum-v4 +582.4 (holds;" in table
    stale = {name for name, (text, new) in tables.regenerated(changed).items() if text != new}
    assert stale == {"README.md", "docs/benchmarks.md", "docs/ppo.md"}  # the headline shows the mean too
    with pytest.raises(tables.RecordError, match="ppo-zoo-returns.json: docs/ppo.md's zoo returns table"):
        tables.zoo_returns_table([record for record in records if record["name"] != "ppo-zoo-returns"])


def test_the_divisions_table_has_every_run_of_every_divisions_record(records):
    changed = copy.deepcopy(records)
    chosen = [record for record in changed if record["name"].startswith("ghm-multi-divisions")]
    runs = [run for record in chosen for run in record["figures"]["runs"]]
    runs[0]["worst_pct"], runs[0]["reaches_target"], runs[0]["step_s_median"] = 12.345, False, 9.876
    table = tables.divisions_table(changed)
    assert " 12.35 (" in table and "| 9.88 |" in table
    assert len([line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]) == len(runs)
    assert " 12.35 (" in table and all(f"`{record['command']}`" in table for record in chosen)
    sizes = [int(line.split("|")[1]) for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert sizes == sorted(sizes)
    with pytest.raises(tables.RecordError, match="divisions table needs"):
        tables.divisions_table([record for record in records if not record["name"].startswith("ghm-multi-div")])


def test_the_scale_table_has_the_single_stream_once_and_every_batched_run(records):
    changed = copy.deepcopy(records)
    scale = [record for record in changed if record["name"].startswith("stream-scale")]
    batched = sum(len(record["figures"]["batched"]) for record in scale)
    text = tables.scale_table(changed)
    assert sum(line.startswith("| batched A2C") for line in text.splitlines()) == batched
    assert sum(line.startswith("| single stream") for line in text.splitlines()) == 1  # one reference run
    assert text.splitlines()[3].endswith("`results/stream-scale.json` |")  # the benchmark before the studies
    benchmark = next(record for record in scale if record["name"] == "stream-scale")
    row = benchmark["figures"]["batched"][0]
    assert f"| {row['ratio']:.3f} |" in text
    assert "**yes**" in text if benchmark["figures"]["pays"] else "**no**" in text
    row["ratio"], row["to_target"], benchmark["figures"]["pays"] = None, None, False
    text = tables.scale_table(changed)
    assert "| never | - |" in text and "(benchmark)" in text
    assert "Scale pays (every seed at 1/10 of the single stream's CPU seconds or less): **no**" in text
