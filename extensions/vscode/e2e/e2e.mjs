// Drives a real VS Code (code-server in headless chromium, through Playwright) with
// the tachy extension installed, against the real `tachy serve` and a replayed agent.
// tests/extensions/test_vscode_e2e.py starts code-server and runs this; see README.md.
//
// Environment:
//   E2E_URL       the workbench URL (code-server's, with ?folder=<repo>)
//   E2E_REPO      the workspace folder (calc.py, bad.json, turns.jsonl, slow.jsonl)
//   E2E_LOGS      VS Code's logs folder (<user-data-dir>/logs): the client's trace
//   E2E_CHROMIUM  the chromium executable (default /usr/bin/chromium)
//   E2E_SHOTS     optional: a folder for screenshots (one on error)
//
// Prints one line `RESULT {json}` with what it saw, and exits 1 when a step failed
// (`error` and `step` in the JSON say where). The assertions are the test's.
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const env = (name, fallback) => {
  const value = process.env[name] ?? fallback;
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const url = env("E2E_URL");
const repo = env("E2E_REPO");
const logDir = env("E2E_LOGS");
const shots = process.env.E2E_SHOTS || "";
const t0 = Date.now();
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
const result = { steps: [] };
const step = (name) => {
  result.step = name;
  result.steps.push(name);
  log(`-- ${name}`);
};

// The client's output channel (with tachy.trace.server: messages) logs each LSP
// message it sends.
function traceLogs(dir) {
  const found = [];
  const walk = (d) => {
    if (!fs.existsSync(d)) return;
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const f = path.join(d, e.name);
      if (e.isDirectory()) walk(f);
      else if (e.name.endsWith("tachy.log")) found.push(f);
    }
  };
  walk(dir);
  return found;
}
const traceHas = (text) => traceLogs(logDir).some((f) => fs.readFileSync(f, "utf8").includes(text));
const traceCount = (text) =>
  traceLogs(logDir).reduce((n, f) => n + fs.readFileSync(f, "utf8").split(text).length - 1, 0);
const readDisk = (name) => fs.readFileSync(path.join(repo, name), "utf8");

const browser = await chromium.launch({
  executablePath: process.env.E2E_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
  ],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
page.setDefaultTimeout(60000);
async function shot(name) {
  if (shots) await page.screenshot({ path: path.join(shots, `${name}.png`) }).catch(() => {});
}
const quickInput = page.locator(".quick-input-widget input");
async function palette(command) {
  await page.keyboard.press("F1");
  await quickInput.waitFor({ state: "visible" });
  await quickInput.fill(">" + command);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: command }).first().waitFor();
  await page.keyboard.press("Enter");
}
async function openFile(name) {
  await page.keyboard.press("Control+P");
  await quickInput.waitFor({ state: "visible" });
  await quickInput.fill(name);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: name }).first().waitFor();
  await page.keyboard.press("Enter");
  await page.locator(".tab", { hasText: name }).waitFor();
}
const tabTitles = async () => (await page.locator(".tab").allInnerTexts()).map((t) => t.trim());
async function waitUntil(cond, ms) {
  const start = Date.now();
  while (!cond() && Date.now() - start < ms) await page.waitForTimeout(250);
  return { ok: Boolean(cond()), seconds: (Date.now() - start) / 1000 };
}

let failed = false;
try {
  step("workbench");
  await page.goto(url);
  await page.locator(".monaco-workbench").waitFor({ timeout: 120000 });
  const status = page.locator(".statusbar-item", { hasText: "tachy" }).first();
  await status.waitFor({ timeout: 90000 });
  // The server is up and its index usable (lexical search at least): the item's
  // tooltip (in its aria-label) says so. Before the first index status it reads just
  // "tachy", so the text alone does not tell.
  await page.waitForFunction(
    () =>
      [...document.querySelectorAll(".statusbar-item")].some((e) =>
        /tachy.*Index: (lexical|ready)/s.test(e.getAttribute("aria-label") || ""),
      ),
    null,
    { timeout: 90000 },
  );
  const settled = page.locator(".statusbar-item[aria-label*='Index: ']").first();
  result.status = {
    text: (await settled.innerText()).trim(),
    label: await settled.getAttribute("aria-label"),
  };
  log(`status bar: ${JSON.stringify(result.status)}`);

  // tachy: Search, with nothing open yet: picking the hit opens its file.
  step("search");
  result.search = { tabsBefore: await tabTitles() };
  await palette("tachy: Search the Codebase");
  await quickInput.fill("add numbers");
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: "calc.py" }).first();
  await row.waitFor();
  result.search.row = (await row.innerText()).replace(/\s+/g, " ").trim();
  await page.keyboard.press("Enter");
  await page.locator(".tab.active", { hasText: "calc.py" }).waitFor({ timeout: 30000 });
  result.search.activeTab = (await page.locator(".tab.active").first().innerText()).trim();
  result.search.tabsAfter = await tabTitles();
  log(`search: ${JSON.stringify(result.search)}`);
  await shot("1-search");

  // The chat view; the replayed agent proposes an edit to calc.py (open in an
  // editor, so it goes through the buffer). Rejected the first time.
  step("ask-reject");
  await palette("tachy: Ask the Agent");
  const chat = page.frameLocator("iframe.webview.ready").frameLocator("#active-frame");
  const ask = async (prompt) => {
    await chat.locator("#prompt").waitFor();
    await chat.locator("#prompt").fill(prompt);
    await chat.locator("#send").click();
  };
  await ask("fix add");
  await chat.locator(".proposal.pending button", { hasText: "Reject" }).click();
  await chat.locator(".final").nth(0).waitFor();
  await page.waitForTimeout(1000);
  result.rejected = {
    proposal: await chat.locator(".proposal").nth(0).innerText(),
    toolResult: await chat.locator(".result").nth(0).innerText(),
    final: await chat.locator(".final").nth(0).innerText(),
    disk: readDisk("calc.py"),
    dirtyTabs: await page.locator(".tab.dirty").count(),
  };
  log(`rejected: ${JSON.stringify(result.rejected)}`);
  await shot("2-rejected");

  // The same again, reviewed in the diff view and accepted.
  step("ask-accept");
  await ask("fix add");
  const accept = chat.locator(".proposal.pending button", { hasText: "Accept" });
  await accept.waitFor();
  await chat.locator(".proposal.pending button", { hasText: "Show diff" }).click();
  await page.locator(".tab", { hasText: "tachy: proposed edit" }).waitFor({ timeout: 30000 });
  result.diffTabsOpen = await page.locator(".tab", { hasText: "tachy: proposed edit" }).count();
  await shot("3-diff");
  await accept.click();
  await chat.locator(".final").nth(1).waitFor();
  // The buffer is saved after the edit is applied; give the save a moment to land.
  await waitUntil(() => readDisk("calc.py").includes("return a + b"), 10000);
  await page.waitForTimeout(1000);
  result.accepted = {
    proposal: await chat.locator(".proposal").nth(1).innerText(),
    final: await chat.locator(".final").nth(1).innerText(),
    disk: readDisk("calc.py"),
    dirtyTabs: await page.locator(".tab.dirty").count(),
    diffTabs: await page.locator(".tab", { hasText: "tachy: proposed edit" }).count(),
    notifications: await page.locator(".notification-toast").allInnerTexts(),
  };
  log(`accepted: ${JSON.stringify(result.accepted)}`);
  await shot("4-accepted");

  // A settings change reaches the running server: tachy.policy switched, through
  // the Settings editor (code-server does not notice settings.json written behind
  // its back), to a replay that runs `sleep 30`.
  step("settings");
  const changesBefore = traceCount("workspace/didChangeConfiguration");
  await palette("Preferences: Open User Settings");
  const search = page
    .locator(".settings-editor .suggest-input-container textarea, .settings-editor .settings-header input")
    .first();
  await search.waitFor({ timeout: 30000 });
  await search.fill("tachy.policy");
  const field = page
    .locator(".settings-editor .setting-item-contents input.input, .settings-editor .setting-item-contents textarea")
    .first();
  await field.waitFor({ timeout: 30000 });
  await page.waitForTimeout(1000);
  await shot("5-settings");
  await field.fill(`replay:${repo}/slow.jsonl`);
  await field.press("Tab");
  await page.waitForTimeout(500);
  await page.keyboard.press("Control+W").catch(() => {});
  const change = await waitUntil(
    () => traceCount("workspace/didChangeConfiguration") > changesBefore,
    30000,
  );
  result.settings = { didChangeConfiguration: change.ok, seconds: change.seconds };
  log(`settings: ${JSON.stringify(result.settings)}`);

  // The new policy is in effect: the next run is the slow one, and Cancel stops it
  // long before its `sleep 30` would end.
  step("cancel");
  await ask("wait a while");
  const sleeping = chat.locator(".tool", { hasText: "sleep 30" });
  await sleeping.waitFor();
  result.settings.nextRunTool = (await sleeping.first().innerText()).trim();
  const cancelAt = Date.now();
  await chat.locator("#cancel").click();
  await chat.locator(".final").nth(2).waitFor({ timeout: 40000 });
  result.cancelled = {
    final: await chat.locator(".final").nth(2).innerText(),
    seconds: (Date.now() - cancelAt) / 1000,
  };
  log(`cancelled: ${JSON.stringify(result.cancelled)}`);
  await shot("6-cancelled");

  // Diagnostics from another source (VS Code's JSON support) are forwarded to the
  // server, and its "Ask tachy to fix" quick fix starts a run shown in the chat.
  step("diagnostics");
  await openFile("bad.json");
  const sent = await waitUntil(() => traceHas("Sending notification 'tachy/diagnostics'"), 30000);
  result.diagnostics = { sent: sent.ok, seconds: sent.seconds };
  log(`diagnostics: ${JSON.stringify(result.diagnostics)}`);

  step("quick-fix");
  await page.locator(".monaco-editor .view-lines").first().click();
  await page.keyboard.press("Control+Home");
  // Wait for VS Code's JSON diagnostics before asking for the quick fixes.
  await page.locator(".squiggly-error").first().waitFor({ timeout: 30000 });
  await page.keyboard.press("Control+.");
  const fix = page.locator(".action-widget").getByText("Ask tachy to fix").first();
  await fix.waitFor({ timeout: 30000 });
  result.quickFix = { title: (await fix.innerText()).trim() };
  await shot("7-quickfix");
  await page.keyboard.press("Enter");
  const fixRun = chat.locator(".user", { hasText: "bad.json" });
  await fixRun.waitFor({ timeout: 30000 });
  result.quickFix.prompt = (await fixRun.first().innerText()).trim();
  log(`quick fix: ${JSON.stringify(result.quickFix)}`);
  await chat.locator("#cancel").click();
  await chat.locator(".final").nth(3).waitFor({ timeout: 40000 });
  result.quickFix.final = await chat.locator(".final").nth(3).innerText();
  await shot("8-done");

  result.notifications = await page.locator(".notification-toast").allInnerTexts();
  result.step = "done";
} catch (error) {
  failed = true;
  result.error = String(error.stack || error).slice(0, 4000);
  await shot("error");
} finally {
  result.seconds = (Date.now() - t0) / 1000;
  console.log("RESULT " + JSON.stringify(result));
  await browser.close().catch(() => {});
}
process.exit(failed ? 1 : 0);
