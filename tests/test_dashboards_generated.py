"""The dashboards as code: the committed JSON and provisioning files match their source, and
every query is InfluxQL filtered by the template variables."""

from __future__ import annotations

import json

import yaml

from clawbed.dashboards import definitions
from clawbed.dashboards.influxdb import DATABASE, DEFAULT_PORT


def test_generated_files_match_their_source() -> None:
    stale = definitions.stale()
    assert not stale, f"stale generated files (run `clawbed dash build` and commit): {stale}"


def test_every_dashboard_is_there_with_its_variables() -> None:
    titles = set()
    for name in ("cell", "flow", "plt"):
        board = json.loads((definitions.GENERATED / f"{name}.json").read_text())
        titles.add(board["title"])
        names = [v["name"] for v in board["templating"]["list"]]
        assert names == ["run", "scenario", "scheme"]
        for variable in board["templating"]["list"]:
            assert variable["query"].startswith("SHOW TAG VALUES FROM ")
            assert variable["datasource"]["uid"] == definitions.DATASOURCE_UID
        for panel in board["panels"]:
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                q = target["query"]
                assert q.startswith("SELECT ") and target["rawQuery"], q
                for needed in ('"run" =~ /^$run$/', '"scenario" =~ /^$scenario$/', '"scheme" =~ /^$scheme$/',
                               "$timeFilter"):
                    assert needed in q, (panel["title"], q)
    assert titles == {"clawbed: Cell", "clawbed: Flow", "clawbed: PLT"}


def test_provisioning_points_at_the_projects_influxdb() -> None:
    datasources = yaml.safe_load((definitions.PROVISIONING / "datasources" / "clawbed.yaml").read_text())
    ds = datasources["datasources"][0]
    assert ds["type"] == "influxdb" and ds["uid"] == definitions.DATASOURCE_UID
    assert ds["url"] == f"http://127.0.0.1:{DEFAULT_PORT}" and ds["jsonData"]["dbName"] == DATABASE
    providers = yaml.safe_load((definitions.PROVISIONING / "dashboards" / "clawbed.yaml").read_text())
    assert providers["providers"][0]["options"]["path"] == definitions.VM_DASHBOARDS_PATH
