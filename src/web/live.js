// wavegate's live console: each <pre data-live> on a page is a command
// still running; its lines are streamed in (server-sent events) after the
// ones the page already shows, and its status says how it ended.
"use strict";
document.querySelectorAll("pre[data-live]").forEach(function (pre) {
  var after = pre.getAttribute("data-after") || "0";
  var source = new EventSource(pre.getAttribute("data-live") + "?after=" + after);
  var status = document.getElementById(pre.id + "-status");
  function add(text) {
    var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.appendChild(document.createTextNode(text + "\n"));
    if (atBottom) {
      pre.scrollTop = pre.scrollHeight;
    }
  }
  source.addEventListener("line", function (event) {
    add(JSON.parse(event.data));
  });
  source.addEventListener("skipped", function (event) {
    add("[wavegate: " + event.data + " lines are not shown here; reload the page for the kept output]");
  });
  source.addEventListener("end", function (event) {
    var end = JSON.parse(event.data);
    if (status) {
      status.textContent = end.description;
      status.className = "state " + (end.succeeded ? "done" : "failed");
    }
    source.close();
  });
});
