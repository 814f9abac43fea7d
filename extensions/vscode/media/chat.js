// The chat view's script: lays out the items the extension posts (see src/chat.ts
// for their shapes). Text is only ever set with textContent: nothing the model or a
// tool writes is interpreted as HTML.
(function () {
  const vscode = acquireVsCodeApi();
  const log = document.getElementById("log");
  const form = document.getElementById("ask");
  const prompt = document.getElementById("prompt");
  const include = document.getElementById("include");
  const cancel = document.getElementById("cancel");
  const proposals = new Map(); // proposalId -> element

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function button(label, message, secondary) {
    const b = el("button", secondary ? "secondary" : "", label);
    b.type = "button";
    b.addEventListener("click", () => vscode.postMessage(message));
    return b;
  }

  function diff(lines) {
    const pre = el("pre", "diff");
    for (const line of lines) {
      const cls = line.op === "+" ? "add" : line.op === "-" ? "del" : "ctx";
      pre.appendChild(el("span", cls, line.op + " " + line.text + "\n"));
    }
    return pre;
  }

  function render(item) {
    switch (item.kind) {
      case "user":
        return el("div", "item user", item.text);
      case "assistant":
        return el("div", "item assistant", item.text);
      case "tool": {
        const box = el("details", "item tool");
        box.appendChild(el("summary", "", "⚙ " + item.title));
        if (item.diff) box.appendChild(diff(item.diff));
        box.open = Boolean(item.diff);
        box.dataset.call = item.callId;
        return box;
      }
      case "result": {
        const box = el("details", "item result" + (item.isError ? " error" : ""));
        box.appendChild(el("summary", "", (item.isError ? "✗ " : "✓ ") + item.tool));
        box.appendChild(el("pre", "", item.text));
        return box;
      }
      case "todos": {
        const list = el("ul", "item todos");
        for (const t of item.todos) {
          const mark = t.status === "completed" ? "☑" : t.status === "in_progress" ? "▶" : "☐";
          list.appendChild(el("li", t.status, mark + " " + t.content));
        }
        return list;
      }
      case "final": {
        const box = el("div", "item final");
        // The last turn's text is usually the answer, already shown: do not repeat it.
        if (!item.repeats) box.appendChild(el("div", "", item.text || "(no answer)"));
        else if (item.stopReason === "end_turn") box.appendChild(el("div", "stop", "done"));
        if (item.stopReason !== "end_turn") box.appendChild(el("div", "stop", "stopped: " + item.stopReason));
        return box;
      }
      case "proposal": {
        const box = el("div", "item proposal " + item.state);
        box.appendChild(el("span", "what", item.change + " " + item.path + " — " + item.state));
        if (item.message) box.appendChild(el("div", "message", item.message));
        const buttons = el("div", "buttons");
        buttons.appendChild(button("Show diff", { type: "show", proposalId: item.proposalId }, true));
        if (item.state === "pending") {
          buttons.appendChild(button("Accept", { type: "accept", proposalId: item.proposalId }));
          buttons.appendChild(button("Reject", { type: "reject", proposalId: item.proposalId }, true));
        } else if (item.state === "applied") {
          buttons.appendChild(button("Revert", { type: "reject", proposalId: item.proposalId }, true));
        }
        box.appendChild(buttons);
        return box;
      }
      case "error":
        return el("div", "item error", item.text);
      default:
        return null;
    }
  }

  function add(item) {
    const node = render(item);
    if (!node) return;
    if (item.kind === "proposal") {
      const old = proposals.get(item.proposalId);
      proposals.set(item.proposalId, node);
      if (old) {
        old.replaceWith(node);
        return;
      }
    }
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
    log.appendChild(node);
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  function setRunning(running) {
    cancel.disabled = !running;
    document.body.classList.toggle("running", running);
  }

  window.addEventListener("message", (event) => {
    const msg = event.data;
    if (msg.type === "reset") {
      log.textContent = "";
      proposals.clear();
      msg.items.forEach(add);
      setRunning(msg.running);
    } else if (msg.type === "item") {
      add(msg.item);
    } else if (msg.type === "running") {
      setRunning(msg.running);
    } else if (msg.type === "focus") {
      if (msg.prefill) prompt.value = msg.prefill;
      prompt.focus();
    }
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = prompt.value.trim();
    if (!text) return;
    vscode.postMessage({ type: "ask", prompt: text, include: include.value });
    prompt.value = "";
  });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  cancel.addEventListener("click", () => vscode.postMessage({ type: "cancel" }));
  document.getElementById("clear").addEventListener("click", () => vscode.postMessage({ type: "clear" }));
  vscode.postMessage({ type: "ready" });
})();
