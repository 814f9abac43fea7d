-- Agent edits under review: tachy/review/propose notifications become inline diffs
-- (extmarks) in the target buffer, accepted or rejected with tachy/review/accept /
-- reject. Once an edit is applied (the server changed the buffer through
-- workspace/applyEdit and wrote the file), the buffer is written so that buffer and
-- disk agree.
local util = require("tachy.util")
local config = require("tachy.config")

local M = {}

M.ns = vim.api.nvim_create_namespace("tachy_review")

--- id -> { id, proposal, client_id, buf, marks = {extmark ids}, anchor = extmark id }
M.entries = {}
M.order = {} -- proposal ids in arrival order

local SETTLED_SYNC = { applied = true, reverted = true }

--- The text edits of a proposal's WorkspaceEdit (`changes` or `documentChanges`).
function M.text_edits(proposal)
  local edit = proposal.edit or {}
  local out = {}
  if type(edit.changes) == "table" then
    for _, edits in pairs(edit.changes) do
      vim.list_extend(out, edits)
    end
  end
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.textDocument and change.edits then
      vim.list_extend(out, change.edits)
    end
  end
  table.sort(out, function(a, b)
    return a.range.start.line < b.range.start.line
  end)
  return out
end

--- The rows an edit removes: first, last (0-based, inclusive; last < first: none).
local function removed_rows(edit)
  local first = edit.range.start.line
  local stop = edit.range["end"]
  local last = stop.character > 0 and stop.line or stop.line - 1
  return first, last
end

--- The current lines of the proposal's file: the buffer's, else the disk's.
local function current_lines(proposal)
  local buf = util.buf_for_uri(proposal.uri)
  if buf then
    return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  end
  local path = util.uri_path(proposal.uri)
  local data = path and util.read_file(path)
  return data and util.split_lines(data) or {}
end

--- A unified-looking diff of a proposal, for the chat buffer.
function M.diff_lines(proposal)
  if proposal.kind == "delete" then
    return { "- (the whole file is deleted)" }
  end
  local old = current_lines(proposal)
  local out = {}
  for _, edit in ipairs(M.text_edits(proposal)) do
    local first, last = removed_rows(edit)
    table.insert(out, ("@@ line %d @@"):format(first + 1))
    for row = first, last do
      table.insert(out, "-" .. (old[row + 1] or ""))
    end
    for _, line in ipairs(util.split_lines(edit.newText)) do
      table.insert(out, "+" .. line)
    end
  end
  return out
end

-- ------------------------------------------------------------ buffer display
local function pending_in(buf)
  local found = {}
  for _, id in ipairs(M.order) do
    local e = M.entries[id]
    if e and e.buf == buf and e.proposal.state == "pending" and e.anchor then
      local pos = vim.api.nvim_buf_get_extmark_by_id(buf, M.ns, e.anchor, { details = true })
      if pos[1] then
        local last = pos[3] and pos[3].end_row and math.max(pos[1], pos[3].end_row - 1) or pos[1]
        table.insert(found, { entry = e, row = pos[1], last = last })
      end
    end
  end
  table.sort(found, function(a, b)
    return a.row < b.row
  end)
  return found
end

local function keymaps(buf, on)
  local keys = config.options.keymaps
  if not keys then
    return
  end
  local actions = {
    accept = { function() M.accept_at_cursor() end, "tachy: accept the edit under the cursor" },
    reject = { function() M.reject_at_cursor() end, "tachy: reject the edit under the cursor" },
    next = { function() M.jump(1) end, "tachy: next proposed edit" },
    prev = { function() M.jump(-1) end, "tachy: previous proposed edit" },
  }
  for name, lhs in pairs(keys) do
    if lhs and actions[name] then
      if on then
        vim.keymap.set("n", lhs, actions[name][1], { buffer = buf, desc = actions[name][2] })
      else
        pcall(vim.keymap.del, "n", lhs, { buffer = buf })
      end
    end
  end
  vim.b[buf].tachy_review_keys = on or nil
end

local function hint()
  local keys = config.options.keymaps
  if keys and keys.accept and keys.reject then
    return (" tachy: %s accept · %s reject "):format(keys.accept, keys.reject)
  end
  return " tachy: :TachyAccept · :TachyReject "
end

function M.clear(entry)
  if entry.buf and vim.api.nvim_buf_is_valid(entry.buf) then
    for _, id in ipairs(entry.marks or {}) do
      pcall(vim.api.nvim_buf_del_extmark, entry.buf, M.ns, id)
    end
    if vim.b[entry.buf].tachy_review_keys and #pending_in(entry.buf) == 0 then
      keymaps(entry.buf, false)
    end
  end
  entry.marks, entry.anchor = {}, nil
end

--- Show a pending proposal as an inline diff in its buffer (when loaded): removed
--- lines highlighted DiffDelete, the new text as virtual lines in DiffAdd.
function M.show(entry)
  local buf = util.buf_for_uri(entry.proposal.uri)
  M.clear(entry)
  entry.buf = buf
  if not buf then
    return false
  end
  local count = vim.api.nvim_buf_line_count(buf)
  local function mark(row, opts)
    opts.strict = false
    local id = vim.api.nvim_buf_set_extmark(buf, M.ns, math.min(row, count - 1), 0, opts)
    table.insert(entry.marks, id)
    return id
  end
  local edits = M.text_edits(entry.proposal)
  if entry.proposal.kind == "delete" then
    edits = { { range = { start = { line = 0, character = 0 }, ["end"] = { line = count, character = 0 } }, newText = "" } }
  end
  local width = vim.o.columns
  for i, edit in ipairs(edits) do
    local first, last = removed_rows(edit)
    first = math.min(first, count)
    local added = {}
    for _, line in ipairs(util.split_lines(edit.newText)) do
      local text = line:gsub("\t", string.rep(" ", vim.bo[buf].tabstop))
      table.insert(added, { { text .. string.rep(" ", math.max(0, width - #text)), "DiffAdd" } })
    end
    local anchor
    if last >= first then
      anchor = mark(first, {
        end_row = math.min(last + 1, count),
        end_col = 0,
        hl_group = "DiffDelete",
        hl_eol = true,
        priority = 200,
      })
      if #added > 0 then
        mark(math.min(last, count - 1), { virt_lines = added })
      end
    elseif first < count then
      anchor = mark(first, { virt_lines = added, virt_lines_above = true })
    else
      anchor = mark(count - 1, { virt_lines = added })
    end
    if i == 1 then
      entry.anchor = anchor
      mark(first, { virt_text = { { hint(), "DiffText" } }, virt_text_pos = "eol" })
    end
  end
  if entry.anchor and not vim.b[buf].tachy_review_keys then
    keymaps(buf, true)
  end
  return true
end

--- Show pending proposals for a buffer that was just loaded.
function M.on_buf_read(buf)
  for _, id in ipairs(M.order) do
    local e = M.entries[id]
    if e and e.proposal.state == "pending" and not e.anchor and util.buf_for_uri(e.proposal.uri) == buf then
      M.show(e)
    end
  end
end

-- ------------------------------------------------------ keeping disk in sync
--- The server applied (or reverted) an edit in the buffer and wrote the file:
--- write the buffer too, without autocommands (a format-on-save would change the
--- text behind the agent's back), when it holds exactly what is on disk.
function M.sync_buffer(uri)
  local buf = util.buf_for_uri(uri)
  if not buf or not vim.bo[buf].modified then
    return
  end
  local path = vim.api.nvim_buf_get_name(buf)
  if util.read_file(path) ~= util.buffer_text(buf) then
    util.notify(
      ("%s differs from the file on disk after the agent's edit; not saved"):format(vim.fn.fnamemodify(path, ":~:.")),
      vim.log.levels.WARN
    )
    return
  end
  vim.api.nvim_buf_call(buf, function()
    vim.cmd("silent keepalt keepjumps noautocmd write!")
  end)
end

-- --------------------------------------------------------------- the handler
function M.on_propose(_, proposal, ctx)
  if type(proposal) ~= "table" or not proposal.proposalId then
    return
  end
  local id = proposal.proposalId
  local entry = M.entries[id]
  local before
  if entry then
    before = entry.proposal.state
  else
    entry = { id = id, marks = {} }
    M.entries[id] = entry
    table.insert(M.order, id)
  end
  entry.proposal, entry.client_id = proposal, ctx and ctx.client_id or entry.client_id
  if proposal.state == "pending" then
    M.show(entry)
  else
    M.clear(entry)
    if SETTLED_SYNC[proposal.state] then
      M.sync_buffer(proposal.uri)
    end
  end
  require("tachy.chat").on_proposal(entry, before)
  require("tachy.status").changed()
end

-- ------------------------------------------------------------------ decisions
--- Pending proposals (all, or of one session), in arrival order.
function M.pending(session_id)
  local out = {}
  for _, id in ipairs(M.order) do
    local e = M.entries[id]
    if e.proposal.state == "pending" and (session_id == nil or e.proposal.sessionId == session_id) then
      table.insert(out, e)
    end
  end
  return out
end

--- Accept (accept = true) or reject one proposal; callback(err, result).
function M.decide(entry, accept, callback)
  local client = vim.lsp.get_client_by_id(entry.client_id) or util.client()
  local method = accept and "review/accept" or "review/reject"
  util.request(client, method, { proposalId = entry.id }, function(err, result)
    if err then
      util.notify(("%s %s failed: %s"):format(method, entry.id, err.message or vim.inspect(err)), vim.log.levels.ERROR)
    elseif not result.ok then
      util.notify(("%s: %s"):format(entry.proposal.path, result.message or result.state), vim.log.levels.WARN)
    else
      if result.state == "applied" or result.state == "reverted" then
        M.sync_buffer(entry.proposal.uri)
      end
      util.notify(("%s: %s"):format(entry.proposal.path, result.state))
    end
    if callback then
      callback(err, result)
    end
  end)
end

--- The proposal under (or nearest above) the cursor in the current buffer.
local function at_cursor()
  local buf = vim.api.nvim_get_current_buf()
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  local found = pending_in(buf)
  local best
  for _, f in ipairs(found) do
    if f.row <= row + 1 then -- virtual lines above a row belong to it
      best = f
    end
    if row >= f.row and row <= f.last then
      return f.entry
    end
  end
  return (best or found[1] or {}).entry
end

--- Accept (true) or reject (false) the proposal under or nearest the cursor.
function M.decide_at_cursor(accept)
  local e = at_cursor()
  if not e then
    return util.notify("no proposed edit in this buffer", vim.log.levels.WARN)
  end
  M.decide(e, accept)
end

function M.accept_at_cursor()
  M.decide_at_cursor(true)
end

function M.reject_at_cursor()
  M.decide_at_cursor(false)
end

--- Move the cursor to the next (dir 1) or previous (-1) proposal in the buffer.
function M.jump(dir)
  local row = vim.api.nvim_win_get_cursor(0)[1] - 1
  local found = pending_in(vim.api.nvim_get_current_buf())
  if #found == 0 then
    return util.notify("no proposed edit in this buffer", vim.log.levels.WARN)
  end
  local target
  if dir > 0 then
    for _, f in ipairs(found) do
      if f.row > row then
        target = f
        break
      end
    end
    target = target or found[1]
  else
    for i = #found, 1, -1 do
      if found[i].row < row then
        target = found[i]
        break
      end
    end
    target = target or found[#found]
  end
  vim.api.nvim_win_set_cursor(0, { target.row + 1, 0 })
end

--- :TachyAccept / :TachyReject: `arg` is a proposal id, "all", or empty (the
--- proposal under the cursor, the one in the current chat session, or the only
--- pending one).
function M.command(accept, arg, bang)
  local targets
  if arg == "all" then
    targets = M.pending()
  elseif bang then -- all of the chat buffer's run, or all
    targets = M.pending(vim.b.tachy_session)
  elseif arg and arg ~= "" then
    local e = M.entries[arg]
    if not e then
      return util.notify("there is no proposal " .. arg, vim.log.levels.ERROR)
    end
    targets = { e }
  else
    local e = at_cursor()
    if not e then
      local candidates = M.pending(vim.b.tachy_session)
      if #candidates == 1 then
        e = candidates[1]
      elseif #candidates > 1 then
        local ids = vim.tbl_map(function(c)
          return c.id .. " (" .. c.proposal.path .. ")"
        end, candidates)
        return util.notify(
          "several edits wait for review; name one or use 'all': " .. table.concat(ids, ", "),
          vim.log.levels.WARN
        )
      end
    end
    targets = { e }
  end
  if #targets == 0 then
    return util.notify("no proposed edit is waiting for review", vim.log.levels.WARN)
  end
  for _, e in ipairs(targets) do
    M.decide(e, accept)
  end
end

function M.complete(arglead, accept)
  local out = { "all" }
  for _, id in ipairs(M.order) do
    local state = M.entries[id].proposal.state
    if state == "pending" or (state == "applied" and not accept) then
      table.insert(out, id)
    end
  end
  return vim.tbl_filter(function(s)
    return s:sub(1, #arglead) == arglead
  end, out)
end

return M
