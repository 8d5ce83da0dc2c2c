# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A run's report: ``artifacts/<exp>/<submission>/report.html``, one self-contained page that ray_job_wait writes on
the controller beside the driver log and the metrics CSV (refreshed with them while the job runs, final at its end).

What it shows (docs/OBSERVABILITY.md): the run's header (experiment, attempts, status, code, environment, nodes and
GPUs, times, GPU-hours and cost), a chart of every metric column against the step (or the time each step was first
read), the nodes' utilisation over the run's window (from Prometheus, :mod:`observe.prometheus`, when it is on), the
faults and recoveries as marks on the same time axis and in a table, and links to the logs.

Why it is built this way:

* The charts are uPlot's (vendor/, MIT), inlined: the page opens offline and asks nothing of any server; a
  Content-Security-Policy of ``default-src 'none'`` makes the browser hold it to that.
* Data goes in as JSON inside ``<script type="application/json">`` with every ``<``, ``>`` and ``&`` written as a
  ``\\u`` escape, so no metric name, node name or log text can close the script; every text shown elsewhere is
  HTML-escaped. The page shows no environment value, token or secret: only what the wait's result holds (masked).
* A run of days stays a page of a few MB: each curve is thinned to :data:`CURVE_WIDTH` columns (each column's first,
  lowest, highest and last point, so spikes stay), values to 6 significant digits, utilisation to what the Prometheus
  query's step gave (about 1000 points a series).
"""

from __future__ import annotations

import datetime
import hashlib
import html
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.run_cost import iso_epoch
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.failure_causes import kernel_line

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.verl.metrics import Follow

MODE = 0o600
NAME = "report.html"
DATA = "report.json"  # what the page was built from, beside it: run_report adds what the nodes' logs say later
KERNEL_AFTER_S = 300  # kernel events this long after the run's end are still its own (a GPU lost as the job died)
VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor")
# The vendored files as released (vendor/README.md): a changed file is caught by the unit tests, not shipped unseen.
VENDOR_SHA256 = {
    "uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
    "uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
}
CURVE_WIDTH = 400  # columns a curve is thinned to: at most 4 points each
UTIL_POINTS = 2000  # points a node's utilisation series keeps (Prometheus's step gives about 1000)
KINDS = (("cpu", "CPU %"), ("memory", "memory %"), ("gpu", "GPU %"), ("gpu_memory", "GPU memory %"))
WHAT = {
    "attempt_start": "attempt {attempt} started ({submission_id})",
    "attempt_end": "attempt {attempt} ended {status}{why}",
    "unreachable": "the Ray dashboard stopped answering",
    "reachable": "the Ray dashboard answers again",
    "node_lost": "node {node} left the cluster",
    "node_back": "node {node} is back in the cluster",
    "head_restart": "the Ray head went down or restarted{on}",
    "stalled": "no new step: the run is stalled",
    "recovery": "recovery began (after {after})",
    "resubmitted": "attempt {attempt} submitted, {resume}",
    "first_step": "attempt {attempt} printed its first step{proof}",
    "not_resumed": "attempt {attempt} started over at step {first_step} instead of resuming from step {resume_step}: "
    "stopped, no further attempt",
    "kernel": "{node}: {what}",
    "deadline": "recovery.deadline left no time for another attempt: none was made",
    "replaced": "{node}, gone for good, replaced by {new} ({new_ip}, rental {rental}; rental {old_rental} given back)",
}


def vendored(name: str) -> str:
    with open(os.path.join(VENDOR, name), encoding="utf-8") as f:
        return f.read()


# --- the run's data, from the watch --------------------------------------------------------------------


def epoch(value: Any) -> float | None:
    """Epoch seconds of an ISO time (Ray's ``2024-05-01T10:00:00.000Z``) or a number; None otherwise."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    return iso_epoch(str(value))


def utc(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def span(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    seconds = int(round(max(0.0, seconds)))
    days, rest = divmod(seconds, 86400)
    text = "%d:%02d:%02d" % (rest // 3600, rest // 60 % 60, rest % 60)
    return "%dd %s" % (days, text) if days else text


def _round(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float("%.6g" % value)


def attempt_curves(attempt: int, submission_id: str, follow: Follow, width: int = CURVE_WIDTH) -> dict[str, Any]:
    """One attempt's curves from its :class:`verl.metrics.Follow`: ``{attempt, submission_id, metrics: [(key,
    [(step, epoch_s or None, value)])]}``, every CSV column (one without a finite value has no points)."""
    seen = follow.seen_at
    curves = [
        (key, [(step, seen.get(step), _round(value)) for step, value in points]) for key, points in follow.curves(width)
    ]
    named = set(key for key, dummy in curves)
    curves += [(key, []) for key in follow.columns if key not in named]
    return dict(attempt=attempt, submission_id=submission_id, metrics=curves)


def events_from_watch(
    events: Iterable[Any] | None,
    marks: Iterable[Any] | None,
    started: float | None,
    attempts: Iterable[Mapping[str, Any]] | None = (),
) -> list[dict[str, Any]]:
    """The watchdog's events and marks (``at_s`` seconds after the watch began at epoch ``started``) and the attempts'
    own start and end times, as ``[{at, kind, text}]`` in time order: absolute times on the utilisation charts' axis."""
    out = []

    def add(at, kind, **fields):
        if at is not None:
            out.append(dict(at=float(at), kind=kind, text=WHAT[kind].format(**fields)))

    def rel(seconds):
        return None if seconds is None or started is None else started + float(seconds)

    for row in attempts or ():
        add(
            epoch(row.get("start_time")),
            "attempt_start",
            attempt=row.get("attempt"),
            submission_id=row.get("submission_id"),
        )
        why = row.get("why")
        add(
            epoch(row.get("end_time")),
            "attempt_end",
            attempt=row.get("attempt"),
            status=row.get("status") or "",
            why=" (%s)" % why.replace("_", " ") if why and why != "succeeded" else "",
        )
    for event in list(events or ()) + list(marks or ()):
        kind = event.get("event")
        if kind == "resubmitted":
            step = event.get("resume_step")
            add(rel(event.get("detected_s")), "recovery", after=str(event.get("after") or "?").replace("_", " "))
            add(
                rel(event.get("submitted_s")),
                "resubmitted",
                attempt=event.get("attempt"),
                resume="resumes from checkpoint step %s" % step if step is not None else "starts from scratch",
            )
            proven, first = event.get("resume_proven"), event.get("first_logged_step")
            proof = {
                True: " (step %s: resumed from step %s)" % (first, step),
                False: " (step %s: started over)" % first,
            }
            add(
                rel(event.get("first_step_s")),
                "first_step",
                attempt=event.get("attempt"),
                proof=proof.get(proven, " (recovered)"),
            )
        elif kind == "not_resumed":
            add(
                rel(event.get("at_s")),
                kind,
                attempt=event.get("attempt"),
                first_step=event.get("first_step"),
                resume_step=event.get("resume_step"),
            )
        elif kind == "replaced":
            add(
                rel(event.get("done_s")),
                kind,
                **dict((k, event.get(k) or "?") for k in ("node", "new", "new_ip", "rental", "old_rental")),
            )
        elif kind in WHAT:
            add(
                rel(event.get("at_s")),
                kind,
                node=event.get("node") or "?",
                on=" (%s)" % event["node"] if event.get("node") else "",
            )
    return sorted(out, key=lambda e: e["at"])


def window(run: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """``(start, end)`` epoch seconds of the run: its first attempt's start (else the watch's), its end (else now)."""
    rows = run.get("attempts") or []
    starts = [s for s in (epoch(r.get("start_time")) for r in rows) if s is not None]
    start = min(starts) if starts else run.get("watch_started")
    if not run.get("final"):
        return start, None
    ends = [e for e in (epoch(r.get("end_time")) for r in rows) if e is not None]
    return start, max(ends) if ends else run.get("generated_at")


# --- the page ----------------------------------------------------------------------------------------


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` as ``\\u`` escapes (JSON.parse reads them
    back); NaN and infinities are not JSON, so they must be None already."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def header_rows(run: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``[(label, text)]`` of what is known; a missing value leaves its row out (never "None")."""
    start, end = window(run)
    now: Any = run.get("generated_at")
    cost = run.get("cost") or {}
    rows = [("experiment", run.get("experiment")), ("submission", run.get("submission_id"))]
    status = run.get("status") or ("RUNNING" if not run.get("final") else "UNKNOWN" if run.get("reason_line") else None)
    rows.append(
        (
            "status",
            "%s%s" % (status, " - %s" % run["reason_line"] if run.get("reason_line") else "") if status else None,
        )
    )
    attempts = run.get("attempts") or []
    if attempts:
        rows.append(
            (
                "attempts",
                "; ".join(
                    "%s. %s %s%s"
                    % (
                        a.get("attempt"),
                        a.get("submission_id"),
                        a.get("status") or "RUNNING",
                        ", steps reached %s" % a["last_step"] if a.get("last_step") is not None else "",
                    )
                    for a in attempts
                ),
            )
        )
    code = run.get("code") or {}
    if code.get("commit"):
        ref = " (ref %s)" % code["ref"] if code.get("ref") else ""
        rows.append(("code", "%s@%s%s" % (code.get("repo") or "", code["commit"], ref)))
    rows += [("environment", run.get("fingerprint")), ("image", run.get("image"))]
    nodes = run.get("nodes") or []
    if nodes:
        rows.append(("nodes", "%d: %s" % (len(nodes), ", ".join(nodes))))
    left = [re.sub(r"^left out:\s*", "", str(line)) for line in run.get("left_out") or []]
    if left:
        rows.append(("left out", "; ".join(left)))
    if run.get("gpus"):
        rows.append(("GPUs", run["gpus"]))
    if end is not None:
        ended = utc(end)
    elif now and not run.get("final"):
        ended = "still running (report of %s)" % utc(now)
    else:
        ended = None
    rows += [("started", utc(start)), ("ended", ended)]
    if cost.get("seconds") is not None:
        seconds = cost["seconds"]
    elif start is not None and (end or now):
        seconds = (end if end is not None else now) - start
    else:
        seconds = None
    rows.append(("duration", span(seconds)))
    if cost.get("gpu_hours") is not None:
        rows.append(("GPU-hours", "%.2f" % cost["gpu_hours"]))
    if cost.get("cost") is not None:
        rows.append(
            (
                "cost",
                "$%.2f (%d node(s) at $%.2f/h)"
                % (cost["cost"], cost.get("nodes") or len(nodes), cost.get("cost_per_hour") or 0.0),
            )
        )
    if run.get("given_back"):
        rows.append(("machines given back", run["given_back"]))
    if run.get("causes"):
        rows.append(("what the logs say", "; ".join(run["causes"])))
    return [(label, text) for label, text in rows if text not in (None, "")]


def _columns(points, width):
    """Points as the page's columns ``[[x...], [y...]]``, thinned to ``width`` evenly when there are more."""
    if len(points) > width:
        stride = len(points) / float(width)
        points = [points[int(i * stride)] for i in range(width)] + [points[-1]]
    return [[round(float(p[0]), 1) for p in points], [_round(p[1]) if p[1] is not None else None for p in points]]


def page_data(run: Mapping[str, Any]) -> dict[str, Any]:
    start, end = window(run)
    curves = []
    for att in run.get("curves") or []:
        curves.append(
            dict(
                attempt=att.get("attempt"),
                sid=att.get("submission_id"),
                series=dict(
                    (
                        key,
                        [
                            [p[0] for p in pts],
                            [None if p[1] is None else round(p[1], 1) for p in pts],
                            [p[2] for p in pts],
                        ],
                    )
                    for key, pts in att.get("metrics") or []
                ),
            )
        )
    order = []
    for att in run.get("curves") or []:
        for key, _dummy in att.get("metrics") or []:
            if key not in order:
                order.append(key)
    util = run.get("utilisation") or {}
    return dict(
        metrics=order,
        curves=curves,
        util=[
            dict(
                kind=kind,
                title=title,
                nodes=sorted(util[kind]),
                series=[_columns(list(util[kind][node]), UTIL_POINTS) for node in sorted(util[kind])],
            )
            for kind, title in KINDS
            if util.get(kind)
        ],
        events=[dict(t=e["at"], kind=e["kind"], text=e["text"]) for e in run.get("events") or []],
        window=[start, end if end is not None else run.get("generated_at")],
    )


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1e1e1e;max-width:1500px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse}td,th{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
th{color:#555;font-weight:600}.grid{display:flex;flex-wrap:wrap;gap:12px}
.chart{border:1px solid #ddd;padding:4px}.chart h3{font-size:13px;margin:2px 0;font-weight:600;word-break:break-all}
.note{color:#555}.events td{border-top:1px solid #eee}
"""

SCRIPT = r"""
(function(){
var D=JSON.parse(document.getElementById("report-data").textContent);
var C=["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
var EC={node_lost:"#d62728",head_restart:"#d62728",stalled:"#ff7f0e",unreachable:"#ff7f0e",reachable:"#2ca02c",
 node_back:"#2ca02c",recovery:"#9467bd",resubmitted:"#9467bd",first_step:"#2ca02c",attempt_start:"#7f7f7f",
 attempt_end:"#7f7f7f",kernel:"#d62728"};
function marks(on){return [function(u){if(!on())return;var c=u.ctx;c.save();c.lineWidth=1;c.setLineDash([5,4]);
 D.events.forEach(function(e){var x=u.valToPos(e.t,"x",true);if(x<u.bbox.left||x>u.bbox.left+u.bbox.width)return;
 c.strokeStyle=EC[e.kind]||"#555";c.beginPath();c.moveTo(x,u.bbox.top);c.lineTo(x,u.bbox.top+u.bbox.height);
 c.stroke();});c.restore();}];}
function box(parent,title){var d=document.createElement("div");d.className="chart";var h=document.createElement("h3");
 h.textContent=title;d.appendChild(h);parent.appendChild(d);return d;}
function sorted(xs,ys){var i=xs.map(function(x,k){return k;}).filter(function(k){return xs[k]!==null;});
 i.sort(function(a,b){return xs[a]-xs[b];});
 return [i.map(function(k){return xs[k];}),i.map(function(k){return ys[k];})];}
function UTC(ts){return uPlot.tzDate(new Date(ts*1e3),"Etc/UTC");}
function join(tables){if(tables.length===1)return tables[0];return uPlot.join(tables);}
var charts=[],byTime=false,W=440,H=170,AX=function(u,v){var n=0;(v||[]).forEach(function(t){n=Math.max(n,
 String(t).length);});return 18+7*n;};
function curves(){charts.forEach(function(c){c.destroy();});charts=[];var root=document.getElementById("curves");
 root.innerHTML="";D.metrics.forEach(function(key){var tables=[],series=[{label:byTime?"time":"step"}];
  D.curves.forEach(function(a,n){var s=a.series[key];if(!s||!s[0].length)return;
   tables.push(byTime?sorted(s[1],s[2]):[s[0],s[2]]);
   series.push({label:D.curves.length>1?"attempt "+a.attempt:key,stroke:C[n%C.length],spanGaps:true,
    points:{show:s[0].length<3}});});
  var d=box(root,key);if(!tables.length){d.appendChild(document.createTextNode("no finite value"));return;}
  var data=join(tables);if(!data[0].length){d.appendChild(document.createTextNode("no time recorded"));return;}
  charts.push(new uPlot({width:W,height:H,series:series,scales:{x:{time:byTime}},axes:[{},{size:AX}],tzDate:UTC,
   hooks:{draw:marks(function(){return byTime;})}},data,d));});}
function util(){var root=document.getElementById("util");D.util.forEach(function(k){var d=box(root,k.title);
 var tables=k.series,series=[{label:"time"}];k.nodes.forEach(function(n,i){series.push({label:n,
  stroke:C[i%C.length],spanGaps:false});});var w=D.window;
 new uPlot({width:W*1.5,height:H+20,series:series,tzDate:UTC,scales:{x:{time:true,range:function(u,a,b){
  return [w[0]!==null?w[0]:a,w[1]!==null?w[1]:b];}},y:{range:[0,100]}},hooks:{draw:marks(function(){return true;})}},
  join(tables),d);});}
document.querySelectorAll("input[name=xaxis]").forEach(function(r){r.addEventListener("change",function(){
 byTime=r.value==="time"&&r.checked;curves();});});
curves();util();
})();
"""


def _events_table(events):
    if not events:
        return '<p class="note">No fault, recovery or other event during the watch.</p>'
    rows = "".join("<tr><td>%s</td><td>%s</td></tr>" % (_esc(utc(e["at"])), _esc(e["text"])) for e in events)
    return '<table class="events"><tr><th>time</th><th>event</th></tr>%s</table>' % rows


def _links(run):
    items = [
        '<li><a href="%s">driver log %s</a></li>' % (_esc(quote(rel)), _esc(label))
        for label, rel in run.get("logs") or []
    ]
    items += [
        '<li><a href="%s">logs of node %s</a></li>' % (_esc(quote(rel)), _esc(host))
        for host, rel in run.get("node_logs") or []
    ]
    if not items:
        return '<p class="note">No log saved yet.</p>'
    note = (
        ""
        if run.get("node_logs")
        else '<p class="note">Per-node logs: run logs.yml for the experiment, they land in nodes/ beside this page.</p>'
    )
    return "<ul>%s</ul>%s" % ("".join(items), note)


def build(run: Mapping[str, Any]) -> str:
    """The page's text from ``run`` (a plain dict: experiment, submission_id, status, reason_line, attempts, code,
    fingerprint, image, nodes, left_out (fitness.yml's lines), gpus, cost, curves (:func:`attempt_curves`),
    utilisation, utilisation_note, events (:func:`events_from_watch`, :func:`kernel_rows`), causes (why it failed,
    :func:`amend`), logs and node_logs (``[(label, relative path)]``), watch_started, generated_at, final)."""
    title = "%s - %s" % (run.get("experiment") or "run", run.get("submission_id") or "")
    header = "".join("<tr><th>%s</th><td>%s</td></tr>" % (_esc(label), _esc(text)) for label, text in header_rows(run))
    util_note = (
        ""
        if run.get("utilisation")
        else '<p class="note">Node utilisation is not available: %s.</p>'
        % _esc(run.get("utilisation_note") or "no Prometheus data was given for this run")
    )
    csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
    return "".join(
        (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n',
            '<meta http-equiv="Content-Security-Policy" content="%s">\n' % csp,
            '<meta name="generator" content="rlinfra.verl ray_job_wait">\n',
            "<title>%s</title>\n" % _esc(title),
            "<style>%s</style>\n<style>%s</style>\n" % (vendored("uPlot.min.css"), STYLE),
            "</head><body>\n<h1>%s</h1>\n" % _esc(title),
            '<p class="note">%s</p>\n'
            % _esc(
                (
                    "Final report, written %s."
                    if run.get("final")
                    else "The run was still going when this was written (%s); it is rewritten as it goes on."
                )
                % (utc(run.get("generated_at")) or "")
            ),
            "<table>%s</table>\n" % header,
            '<h2>Training curves</h2>\n<p>x axis: <label><input type="radio" name="xaxis" value="step" checked> step'
            '</label> <label><input type="radio" name="xaxis" value="time"> time the step was read (UTC; events '
            "marked)</label></p>\n",
            "<noscript><p>The charts need JavaScript; the tables do not.</p></noscript>\n",
            '<div id="curves" class="grid"></div>\n'
            if run.get("curves")
            else '<div id="curves" class="grid"></div><p class="note">No step printed yet.</p>\n',
            '<h2>Node utilisation</h2>\n<p class="note">Times in UTC; dashed lines mark the events below.</p>\n%s'
            '<div id="util" class="grid"></div>\n' % util_note,
            "<h2>Events</h2>\n%s\n" % _events_table(run.get("events") or []),
            "<h2>Logs</h2>\n%s\n" % _links(run),
            '<script type="application/json" id="report-data">%s</script>\n' % script_json(page_data(run)),
            "<script>%s</script>\n<script>%s</script>\n" % (vendored("uPlot.iife.min.js"), SCRIPT),
            "</body></html>\n",
        )
    )


def write(directory: str, run: Mapping[str, Any]) -> str:
    """``<directory>/report.html`` and the data it was built from, ``report.json`` (0600 each, whole or not at all);
    OSError ELOOP when a link stands in the place of either (the link and what it points at are left alone). Returns
    the page's path."""
    path, data = os.path.join(directory, NAME), os.path.join(directory, DATA)
    files.refuse_link(path, "the run report")
    files.refuse_link(data, "the run report's data")
    files.write_atomic(data, json.dumps(run, sort_keys=True, default=str) + "\n", MODE)
    files.write_atomic(path, build(run), MODE)
    return path


def load(directory: str) -> dict[str, Any] | None:
    """The data ``<directory>/report.html`` was last built from, or None when there is none (no report written, or
    one from before report.json); ValueError when it is not what :func:`write` writes."""
    path = os.path.join(directory, DATA)
    files.refuse_link(path, "the run report's data")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        run = json.loads(text)
    except ValueError as e:
        raise ValueError("%s is not the run report's data (%s)" % (path, e)) from e
    if not isinstance(run, dict) or "submission_id" not in run:
        raise ValueError("%s is not the run report's data (no submission_id)" % path)
    return run


def kernel_rows(run: Mapping[str, Any], host: str, events: Iterable[Any] | None) -> list[dict[str, Any]]:
    """A node's kernel events (ray_node_logs' ``kernel_events``, each placed on the clock as ``epoch`` on the node)
    that fall in the run's window - from its start to :data:`KERNEL_AFTER_S` after its end - as report events
    ``{at, kind: kernel, text}``: ``gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:3b:00``. The kernel log
    reaches back to the node's boot: what came before the run is the failure line's, not the run's timeline."""
    start, end = window(run)
    end = end if end is not None else run.get("generated_at")
    out = []
    for event in events or []:
        at = event.get("epoch") if isinstance(event, dict) else None
        what = kernel_line(event) if isinstance(event, dict) else None
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or what is None:
            continue
        if (start is not None and at < start) or (end is not None and at > end + KERNEL_AFTER_S):
            continue
        out.append(dict(at=float(at), kind="kernel", text=WHAT["kernel"].format(node=host, what=what)))
    return out


def head_gone_line(
    run: Mapping[str, Any] | None, head: str, cluster: str, experiment: str, error: object, path: str
) -> str:
    """The one line of a submit, status or stop whose head does not answer: what this controller last saw of the run
    (``run``: its report's data, None for none) and the commands that bring it back."""
    first = (str(error or "no answer").strip().splitlines() or ["no answer"])[0][:200]
    out = ["the head %s of Ray cluster %s does not answer (%s): the cluster is down or gone" % (head, cluster, first)]
    if isinstance(run, dict):
        rows = [r for r in run.get("attempts") or [] if isinstance(r, dict)]
        last = rows[-1] if rows else {}
        seen = "last seen %s at %s" % (
            run.get("status") or last.get("status") or "with no status",
            utc(run["generated_at"]) if isinstance(run.get("generated_at"), (int, float)) else "?",
        )
        step = last.get("last_step")
        ckpt: Any = run.get("checkpoint") if isinstance(run.get("checkpoint"), dict) else {}
        out.append(
            "run %s (attempt %s) was %s, at step %s; its newest checkpoint: %s"
            % (
                run.get("submission_id"),
                last.get("attempt") or 1,
                seen,
                "-" if step is None else step,
                "step %s in %s" % (ckpt["step"], ckpt.get("dir"))
                if ckpt.get("step") is not None
                else "not known here (the run's supervisor keeps it in .rlinfra-run.json beside the checkpoints)",
            )
        )
        out.append("report: %s" % path)
    else:
        out.append("this controller has no report of the run (%s)" % path)
    out.append(
        "bring the machines back (provision.yml when they were rented, then site.yml); then submit.yml -e exp=%s "
        "resumes from the checkpoints on the shared volume" % experiment
    )
    return "; ".join(out)


def carried(old: Mapping[str, Any] | None, run: dict[str, Any]) -> dict[str, Any]:
    """``run`` (the wait's data now) with what :func:`amend` added to the report before (``old``, its data; None for
    none) kept: the nodes' kernel events and the causes. logs.yml may gather the logs of a run still being waited for;
    the wait's next rewrite must not drop them."""
    if not isinstance(old, dict):
        return run
    kept = [e for e in old.get("events") or [] if isinstance(e, dict) and e.get("kind") == "kernel"]
    out = dict(run)
    if kept:
        out["events"] = sorted(
            list(run.get("events") or []) + [e for e in kept if e not in (run.get("events") or [])],
            key=lambda e: e["at"],
        )
    if old.get("causes") and not run.get("causes"):
        out["causes"] = list(old["causes"])
    return out


def amend(
    directory: str,
    events: Iterable[Mapping[str, Any]] | None = (),
    causes: Iterable[object] | None = (),
    node_logs: Iterable[Iterable[str]] | None = None,
) -> tuple[str, bool]:
    """The report in ``directory`` rebuilt with what became known after its wait ended: more ``events`` (merged by
    time, each once), the ``causes`` of its failure (failure_causes' lines) and the links to the nodes' logs
    (:func:`node_log_rows`; None keeps those it has). Returns ``(path, changed)``: ``("", False)`` without a report to
    amend, ``changed`` False when it already says all this (nothing is rewritten)."""
    run = load(directory)
    if run is None:
        return "", False

    def key(event):
        return round(float(event["at"]), 3), event["kind"], event["text"]

    merged = list(run.get("events") or [])
    seen = set(key(e) for e in merged)
    for event in events or ():
        if key(event) not in seen:
            seen.add(key(event))
            merged.append(dict(at=float(event["at"]), kind=event["kind"], text=event["text"]))
    new = dict(run, events=sorted(merged, key=lambda e: e["at"]))
    if causes:
        new["causes"] = list(dict.fromkeys(list(run.get("causes") or []) + [str(c) for c in causes]))
    if node_logs is not None:
        new["node_logs"] = [list(row) for row in node_logs]
    path = os.path.join(directory, NAME)
    if json.loads(json.dumps(new, default=str)) == run and os.path.exists(path):
        return path, False
    return write(directory, new), True


def node_log_links(directory: str) -> list[tuple[str, str]]:
    """``[(host, "nodes/<host>/")]`` of the per-node logs logs.yml saved in ``directory``."""
    nodes = os.path.join(directory, "nodes")
    try:
        hosts = sorted(
            h
            for h in os.listdir(nodes)
            if os.path.isdir(os.path.join(nodes, h)) and not os.path.islink(os.path.join(nodes, h))
        )
    except OSError:
        return []
    return [(host, "nodes/%s/" % host) for host in hosts]


def node_log_rows(log_dir: str, run_dir: str, submission_ids: Sequence[str]) -> list[tuple[str, str]]:
    """The report's links to the nodes' logs saved for each attempt (``<log_dir>/<submission id>/nodes/<host>/``,
    logs.yml's or a failed submit's), relative to the report's directory ``run_dir``: ``[(label, link)]``, the label
    naming the attempt when the run has more than one."""
    out = []
    for sid in submission_ids:
        where = os.path.join(log_dir, sid)
        for host, link in node_log_links(where):
            out.append(
                (
                    "%s (%s)" % (host, sid) if len(submission_ids) > 1 else host,
                    os.path.relpath(os.path.join(where, link), run_dir) + "/",
                )
            )
    return out


def checksum(name: str) -> str:
    with open(os.path.join(VENDOR, name), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
