-- Agent runs: :TachyAgent starts tachy/agent/run and opens a chat buffer
-- ("tachy://chat/<sessionId>", markdown) that streams the run's tachy/agent/event
-- notifications: assistant text, tool calls and their results, proposed edits, the
-- final answer and the stop reason.
local util = require("tachy.util")
local config = require("tachy.config")

local M = {}

--- sessionId -> { id, buf, client_id, running, held, stop_reason, last_tool }
M.sessions = {}
M.order = {} -- session ids, oldest first

local counter = 0
local function new_id()
  counter = counter + 1
  return ("nvim-%s-%d"):format(vim.fn.sha256(tostring(vim.uv.hrtime()) .. vim.fn.getpid()):sub(1, 8), counter)
end

-- ------------------------------------------------------------------ buffer
local function open_window(buf)
  if vim.fn.bufwinid(buf) ~= -1 then
    return
  end
  local opener = config.options.chat.open
  local here = vim.api.nvim_get_current_win()
  if type(opener) == "function" then
    opener(buf)
  else
    vim.cmd(opener)
    vim.api.nvim_win_set_buf(0, buf)
  end
  vim.wo.wrap, vim.wo.linebreak, vim.wo.number = true, true, false
  if not config.options.chat.focus and vim.api.nvim_win_is_valid(here) then
    vim.api.nvim_set_current_win(here)
  end
end

local function create_buffer(id)
  local buf = vim.api.nvim_create_buf(true, true)
  -- buftype first: vim.lsp.enable attaches to buffers whose buftype is "" only.
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.api.nvim_buf_set_name(buf, "tachy://chat/" .. id)
  vim.bo[buf].filetype = "markdown"
  vim.bo[buf].modifiable = false
  vim.b[buf].tachy_session = id
  return buf
end

--- The session `id` (created, with its buffer, when new).
function M.session(id, client_id, open)
  local s = M.sessions[id]
  if not s then
    s = { id = id, client_id = client_id, running = false }
    M.sessions[id] = s
    table.insert(M.order, id)
  end
  if not (s.buf and vim.api.nvim_buf_is_valid(s.buf)) then
    s.buf = create_buffer(id)
    M.append(s, { "# tachy · " .. id, "" })
  end
  s.client_id = s.client_id or client_id
  if open then
    open_window(s.buf)
  end
  return s
end

--- Append lines to a session's buffer, following the end in windows already there.
function M.append(s, lines)
  local buf = s.buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  local out = {}
  for _, line in ipairs(lines) do
    for _, part in ipairs(vim.split(line, "\n", { plain = true })) do
      table.insert(out, (part:gsub("\r", "")))
    end
  end
  local count = vim.api.nvim_buf_line_count(buf)
  local empty = count == 1 and vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ""
  local follow = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if vim.api.nvim_win_get_cursor(win)[1] >= count then
      table.insert(follow, win)
    end
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, empty and 0 or -1, -1, false, out)
  vim.bo[buf].modifiable = false
  local last = vim.api.nvim_buf_line_count(buf)
  for _, win in ipairs(follow) do
    vim.api.nvim_win_set_cursor(win, { last, 0 })
  end
end

-- --------------------------------------------------------------- rendering
local function fence_for(text)
  return text:find("```", 1, true) and "~~~~" or "```"
end

--- Lines of `text`, cut to `limit` lines (and very long lines shortened).
local function clip(text, limit)
  local lines = vim.split(text or "", "\n", { plain = true })
  if lines[#lines] == "" then
    table.remove(lines)
  end
  local out = {}
  for i = 1, math.min(#lines, limit) do
    local line = lines[i]
    if #line > 400 then
      line = line:sub(1, 400) .. " …"
    end
    table.insert(out, line)
  end
  if #lines > limit then
    table.insert(out, ("… (%d more lines)"):format(#lines - limit))
  end
  return out
end

local function block(text, limit, lang)
  local fence = fence_for(text or "")
  local out = { fence .. (lang or "") }
  vim.list_extend(out, clip(text, limit))
  table.insert(out, fence)
  return out
end

local function strip_calls(text)
  text = (text or ""):gsub("<tool_call.-</tool_call>", "")
  text = text:gsub("\n%s*\n%s*\n+", "\n\n")
  return vim.trim(text)
end

local PRIMARY = { "path", "command", "query", "pattern", "paths" }

local function short(value)
  if type(value) == "string" then
    return value
  end
  return vim.json.encode(value)
end

local function render_call(event)
  local args = event.args or {}
  local head = "**▶ " .. event.tool .. "**"
  local shown = {}
  for _, key in ipairs(PRIMARY) do
    local v = args[key]
    if v ~= nil and (type(v) ~= "string" or not v:find("\n")) then
      head = head .. " `" .. short(v) .. "`"
      shown[key] = true
      break
    end
  end
  local lines = { head }
  local keys = vim.tbl_keys(args)
  table.sort(keys)
  for _, key in ipairs(keys) do
    if not shown[key] then
      local v = args[key]
      if type(v) == "string" and v:find("\n") then
        table.insert(lines, "- " .. key .. ":")
        vim.list_extend(lines, block(v, config.options.chat.max_arg_lines))
      else
        table.insert(lines, "- " .. key .. ": `" .. short(v) .. "`")
      end
    end
  end
  return lines
end

local function render_result(event)
  local content = event.content or ""
  local status = event.is_error and "error" or "ok"
  local lines = { ("**◀ %s** %s"):format(event.tool, status) }
  if vim.trim(content) ~= "" then
    local lang = content:find("\n@@", 1, true) and "diff" or "text"
    vim.list_extend(lines, block(content, config.options.chat.max_result_lines, lang))
  end
  return lines
end

local TODO_MARK = { pending = "[ ]", in_progress = "[~]", completed = "[x]" }

local function flush_held(s)
  if s.held then
    local text = s.held
    s.held = nil
    if text ~= "" then
      M.append(s, vim.list_extend(vim.split(text, "\n", { plain = true }), { "" }))
    end
  end
end

--- One transcript event into the chat buffer.
function M.render(s, event)
  local kind = event.event
  if kind == "assistant" then
    flush_held(s)
    -- Held until the next event: the final answer repeats the last turn's text.
    s.held = strip_calls(event.text)
    return
  end
  if kind == "final" then
    if s.held and s.held == vim.trim(event.text or "") then
      s.held = nil
    end
    flush_held(s)
    s.stop_reason = event.stop_reason
    local lines = { "---", ("## Final answer · stop reason: %s"):format(event.stop_reason or "?"), "" }
    if vim.trim(event.text or "") ~= "" then
      vim.list_extend(lines, vim.split(event.text, "\n", { plain = true }))
    end
    table.insert(lines, "")
    M.append(s, lines)
    return
  end
  flush_held(s)
  if kind == "run_start" then
    local lines = {}
    for _, line in ipairs(vim.split(event.prompt or "", "\n", { plain = true })) do
      table.insert(lines, "> " .. line)
    end
    table.insert(lines, "")
    M.append(s, lines)
  elseif kind == "tool_call" then
    s.last_tool = event.tool
    M.append(s, vim.list_extend(render_call(event), { "" }))
  elseif kind == "tool_result" then
    M.append(s, vim.list_extend(render_result(event), { "" }))
  elseif kind == "todos" then
    local lines = { "**Todos**" }
    for _, todo in ipairs(event.todos or {}) do
      table.insert(lines, ("- %s %s"):format(TODO_MARK[todo.status] or "[ ]", todo.content))
    end
    table.insert(lines, "")
    M.append(s, lines)
  end
end

-- ---------------------------------------------------------------- handlers
function M.on_event(_, params, ctx)
  if type(params) ~= "table" or not params.sessionId or type(params.event) ~= "table" then
    return
  end
  local known = M.sessions[params.sessionId] ~= nil
  -- A run this editor did not start here (the "Ask tachy to fix" code action) opens
  -- a chat window; a chat buffer that was wiped is made again.
  local s = M.session(params.sessionId, ctx and ctx.client_id, not known)
  if not known then
    s.running = true
  end
  M.render(s, params.event)
  if params.event.event == "final" then
    s.running = false
  end
  require("tachy.status").changed()
end

--- A proposal arrived or changed state (called by tachy.review).
function M.on_proposal(entry, before)
  local p = entry.proposal
  local s = M.sessions[p.sessionId] or M.session(p.sessionId, entry.client_id, false)
  if p.state == "pending" and before == nil then
    flush_held(s)
    local keys = config.options.keymaps
    local where = "file not open"
    if entry.buf then
      where = keys and keys.accept and keys.reject and ("shown in its buffer: %s / %s"):format(keys.accept, keys.reject)
        or "shown in its buffer"
    end
    local lines = {
      ("**Proposed %s** `%s` · id `%s` · %s"):format(p.kind, p.path, p.proposalId, where),
      (":TachyAccept %s  |  :TachyReject %s"):format(p.proposalId, p.proposalId),
    }
    vim.list_extend(lines, block(table.concat(require("tachy.review").diff_lines(p), "\n"), 200, "diff"))
    table.insert(lines, "")
    M.append(s, lines)
  elseif p.state == "applied" and before == nil then
    -- approval "auto": the edit arrives applied; rejecting it reverts the file.
    M.append(s, {
      ("**Applied %s** `%s` · id `%s` · `:TachyReject %s` reverts it"):format(p.kind, p.path, p.proposalId, p.proposalId),
      "",
    })
  elseif p.state ~= before and p.state ~= "pending" then
    local msg = p.message ~= nil and p.message ~= "" and (": " .. p.message) or ""
    M.append(s, { ("*Edit `%s` (%s): %s%s*"):format(p.path, p.proposalId, p.state, msg), "" })
  end
end

-- ------------------------------------------------------------------ commands
--- The prompt with the selected lines of `buf` (line1..line2, 1-based) added.
local function with_selection(prompt, buf, line1, line2)
  local lines = vim.api.nvim_buf_get_lines(buf, line1 - 1, line2, false)
  local name = vim.api.nvim_buf_get_name(buf)
  local client = util.client(buf)
  local rel = name
  if client and client.root_dir and vim.fs.relpath then
    rel = vim.fs.relpath(client.root_dir, name) or name
  end
  local text = table.concat(lines, "\n")
  local fence = fence_for(text)
  return ("%s\n\nThe selected code, %s lines %d-%d:\n%s%s\n%s\n%s"):format(
    prompt,
    rel ~= "" and rel or "[No Name]",
    line1,
    line2,
    fence,
    vim.bo[buf].filetype,
    text,
    fence
  )
end

--- Start an agent run (asks for the prompt when it is empty). opts: { range =
--- { line1, line2 } } to include those lines of the buffer; buf (the current one).
function M.start(prompt, opts)
  opts = opts or {}
  local buf = opts.buf or vim.api.nvim_get_current_buf()
  if vim.trim(prompt or "") == "" then
    vim.ui.input({ prompt = "tachy agent: " }, function(input)
      if input and vim.trim(input) ~= "" and vim.api.nvim_buf_is_valid(buf) then
        M.start(input, vim.tbl_extend("force", opts, { buf = buf }))
      end
    end)
    return
  end
  local client = util.client(buf)
  if not client then
    return util.notify("no tachy language server is running (open a file)", vim.log.levels.ERROR)
  end
  if opts.range then
    prompt = with_selection(prompt, buf, opts.range[1], opts.range[2])
  end
  local id = new_id()
  local s = M.session(id, client.id, true)
  s.running = true
  require("tachy.status").changed()
  util.request(client, "agent/run", { prompt = prompt, sessionId = id }, function(err, result)
    s.running = false
    s.result = result or { error = err and err.message or "no answer" }
    flush_held(s)
    if err then
      M.append(s, { "**Error:** " .. (err.message or vim.inspect(err)), "" })
    else
      s.stop_reason = result.stopReason
      local lines = {}
      if result.error and result.error ~= "" then
        table.insert(lines, "**Error:** " .. result.error)
      end
      if result.changedFiles and #result.changedFiles > 0 then
        table.insert(lines, "Changed: " .. table.concat(result.changedFiles, ", "))
      end
      table.insert(lines, ("*Run %s ended: %s*"):format(id, result.stopReason))
      M.append(s, lines)
    end
    require("tachy.status").changed()
  end, buf)
  return id
end

--- The session :TachyCancel means: the current chat buffer's, else the latest
--- running one.
function M.current_running()
  local here = vim.b.tachy_session
  if here and M.sessions[here] and M.sessions[here].running then
    return M.sessions[here]
  end
  for i = #M.order, 1, -1 do
    local s = M.sessions[M.order[i]]
    if s.running then
      return s
    end
  end
end

function M.cancel(id)
  local s = id and id ~= "" and M.sessions[id] or M.current_running()
  if not s then
    return util.notify("no agent run is running", vim.log.levels.WARN)
  end
  local client = vim.lsp.get_client_by_id(s.client_id) or util.client()
  util.request(client, "agent/cancel", { sessionId = s.id }, function(err, result)
    if err then
      util.notify("cancel failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    elseif not result.cancelled then
      local msg = result.message
      if not msg or msg == "" then
        msg = "run " .. s.id .. " is " .. tostring(result.state)
      end
      util.notify(msg, vim.log.levels.WARN)
    else
      M.append(s, { "*Cancelling…*", "" })
    end
  end)
end

function M.running_count()
  local n = 0
  for _, s in pairs(M.sessions) do
    local client = s.client_id and vim.lsp.get_client_by_id(s.client_id)
    if s.running and (not client or client:is_stopped()) then
      s.running = false -- the server went away with the run
    end
    if s.running then
      n = n + 1
    end
  end
  return n
end

return M
