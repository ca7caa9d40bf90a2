"""The page's inline style sheet and scripts, so the report is one self-contained file."""

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1400px; padding: 0 16px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 16px 0 6px; } .muted, .same { color: #999; } code, pre { font-size: 12.5px; }
table { border-collapse: collapse; margin: 8px 0; } th, td { border: 1px solid #ddd; padding: 3px 8px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } tr.best td { background: #eef6ea; }
table.sortable th { cursor: pointer; background: #f4f4f4; user-select: none; white-space: nowrap; }
table.sortable th[data-dir="asc"]::after { content: " \\25B2"; }
table.sortable th[data-dir="desc"]::after { content: " \\25BC"; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; } figure { margin: 0; } figcaption { font-weight: 600; }
svg.chart text { font-size: 11px; fill: #555; } svg.chart .plot { fill: #fff; stroke: #bbb; }
svg.chart .grid { stroke: #eee; } svg.chart .nonfinite { fill: #d00; font-size: 14px; font-weight: 700; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 6px 0 12px; } .swatch { display: inline-block;
  width: 14px; height: 4px; margin-right: 4px; vertical-align: middle; } .scroll { overflow-x: auto; }
img.thumb { max-width: 260px; max-height: 260px; border: 1px solid #ddd; display: block; margin: 4px 0; }
#script-errors { color: #b00; background: #fee; padding: 8px; }
"""

# registered first, in <head>, so a failing script shows its error in the page itself, where tests read it
ERROR_SCRIPT = """
window.addEventListener("error", function (e) {
  var box = document.getElementById("script-errors");
  if (box) { box.hidden = false; box.textContent += "script error: " + e.message + "\\n"; }
});
"""

SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, column) {
  th.title = "click to sort";
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0];
    var dir = th.dataset.dir === "asc" ? "desc" : "asc";
    table.querySelectorAll("th").forEach(function (h) { delete h.dataset.dir; });
    th.dataset.dir = dir;
    function key(row) {
      var cell = row.cells[column], text = cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent.trim();
      return text === "" ? null : (isNaN(Number(text)) ? text : Number(text));
    }
    var rows = Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) { return (x === null) - (y === null); }  // empty cells last, both ways
      var order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return dir === "asc" ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""
