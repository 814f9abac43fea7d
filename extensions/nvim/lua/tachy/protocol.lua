-- The tachy/* LSP extensions, declared once (mirrors server/protocol.py and
-- extensions/protocol/tachy.json, generated from it; a test checks all three agree).
--
-- Type strings: string, integer, number, boolean, object (a free-form JSON object),
-- any, a type name, "[]" for arrays, "|" for unions, and a trailing "?" for an
-- optional field (one with a default). Field names are the camelCase wire names.
-- The rest of the plugin looks methods up here (require('tachy.util').method) instead
-- of spelling them out.
return {
  methods = {
    { name = "tachy/search", kind = "request", direction = "clientToServer", params = "SearchParams", result = "SearchResult" },
    { name = "tachy/index/status", kind = "request", direction = "clientToServer", params = "IndexStatusParams", result = "IndexStatusResult" },
    { name = "tachy/agent/run", kind = "request", direction = "clientToServer", params = "AgentRunParams", result = "AgentRunResult" },
    { name = "tachy/agent/event", kind = "notification", direction = "serverToClient", params = "AgentEventParams" },
    { name = "tachy/agent/cancel", kind = "request", direction = "clientToServer", params = "AgentCancelParams", result = "AgentCancelResult" },
    { name = "tachy/review/propose", kind = "notification", direction = "serverToClient", params = "Proposal" },
    { name = "tachy/review/accept", kind = "request", direction = "clientToServer", params = "ReviewDecisionParams", result = "ReviewDecisionResult" },
    { name = "tachy/review/reject", kind = "request", direction = "clientToServer", params = "ReviewDecisionParams", result = "ReviewDecisionResult" },
    { name = "tachy/review/list", kind = "request", direction = "clientToServer", params = "ReviewListParams", result = "ReviewListResult" },
    { name = "tachy/diagnostics", kind = "notification", direction = "clientToServer", params = "DiagnosticsParams" },
  },
  -- workspace/executeCommand commands the server offers (in code actions).
  commands = {
    { name = "tachy.askToFix", arguments = { "AskToFixArgs" }, result = "AskToFixResult" },
  },
  types = {
    Position = { line = "integer", character = "integer" },
    Range = { start = "Position", ["end"] = "Position" },
    SearchParams = { query = "string", limit = "integer?", paths = "string[]?", mode = "string?" },
    SearchItem = { uri = "string", range = "Range", score = "number", snippet = "string", symbol = "string?" },
    SearchResult = { results = "SearchItem[]" },
    IndexStatusParams = vim.empty_dict(),
    FolderStatus = { uri = "string", state = "string", files = "integer", chunks = "integer", embedded = "integer", error = "string?" },
    IndexStatusResult = { state = "string", files = "integer", chunks = "integer", embedded = "integer", folders = "FolderStatus[]" },
    AgentRunParams = {
      prompt = "string",
      sessionId = "string?",
      workspaceFolder = "string?",
      policy = "string?",
      maxTurns = "integer?",
      workDoneToken = "string|integer?",
    },
    AgentRunResult = { sessionId = "string", stopReason = "string", finalText = "string?", error = "string?", changedFiles = "string[]?" },
    AgentEventParams = { sessionId = "string", seq = "integer", event = "object" },
    AgentCancelParams = { sessionId = "string" },
    AgentCancelResult = { cancelled = "boolean", state = "string", message = "string?" },
    Proposal = {
      proposalId = "string",
      sessionId = "string",
      uri = "string",
      path = "string",
      kind = "string",
      state = "string",
      edit = "object",
      message = "string?",
    },
    ReviewDecisionParams = { proposalId = "string" },
    ReviewDecisionResult = { ok = "boolean", state = "string", message = "string?" },
    ReviewListParams = { sessionId = "string?" },
    ReviewListResult = { proposals = "Proposal[]" },
    LspDiagnostic = { range = "Range", message = "string", severity = "integer?", code = "string|integer?", source = "string?" },
    DiagnosticsParams = { uri = "string", diagnostics = "LspDiagnostic[]" },
    AskToFixArgs = { uri = "string", diagnostic = "LspDiagnostic", sessionId = "string?" },
    AskToFixResult = { sessionId = "string" },
  },
}
