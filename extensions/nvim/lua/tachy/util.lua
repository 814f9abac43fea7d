-- Small helpers shared by the plugin's modules: method names, clients, buffers.
local protocol = require("tachy.protocol")

local M = {}

M.name = "tachy" -- the vim.lsp.config name

local by_short = {}
for _, m in ipairs(protocol.methods) do
  by_short[m.name:gsub("^tachy/", "")] = m
end

--- The wire name of a tachy method, by its name without "tachy/" ("agent/run").
--- Unknown names fail loudly: every method is declared in tachy.protocol.
function M.method(short)
  local m = by_short[short]
  if not m then
    error("tachy: no method tachy/" .. tostring(short) .. " in tachy.protocol", 2)
  end
  return m.name
end

function M.notify(message, level)
  vim.notify("tachy: " .. message, level or vim.log.levels.INFO)
end

--- Every running tachy client (attached to `bufnr` when given).
function M.clients(bufnr)
  return vim.lsp.get_clients({ name = M.name, bufnr = bufnr })
end

--- The tachy client for `bufnr` (attached to it, else one whose root holds the
--- file, else the first one); nil when none runs.
function M.client(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local attached = M.clients(bufnr)[1]
  if attached then
    return attached
  end
  local all = M.clients()
  local name = vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_name(bufnr) or ""
  if name ~= "" then
    for _, client in ipairs(all) do
      local root = client.root_dir
      if root and vim.fs.relpath and vim.fs.relpath(root, name) then
        return client
      end
    end
  end
  return all[1]
end

--- The workspace folder for `bufnr`: the nearest directory holding a root marker
--- (config root_markers); else the folder of a running tachy client that holds the
--- file; else the file's own directory, as language servers do for a single file.
--- Never the home directory or / (everything would be indexed): nil then, and for
--- buffers that are not files (the server starts without a folder).
function M.root_dir(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == "" or name:match("^%a[%w+.-]*://") then
    return nil
  end
  local root = vim.fs.root(bufnr, require("tachy.config").options.root_markers)
  if root then
    return root
  end
  local file = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  for _, client in ipairs(M.clients()) do
    if client.root_dir and vim.fs.relpath and vim.fs.relpath(client.root_dir, file) then
      return client.root_dir
    end
  end
  local dir = vim.fs.dirname(file)
  local home = vim.uv.os_homedir()
  if dir == "/" or (home and dir == vim.fs.normalize(home)) then
    return nil
  end
  return dir
end

--- Send a tachy request; callback(err, result). A client that is gone answers
--- with an error instead of never.
function M.request(client, short, params, callback, bufnr)
  if not client then
    callback({ message = "no tachy language server is running (open a file)" })
    return
  end
  if bufnr and not vim.api.nvim_buf_is_valid(bufnr) then
    bufnr = nil
  end
  local ok = client:request(M.method(short), params, function(err, result)
    callback(err, result)
  end, bufnr)
  if not ok then
    callback({ message = "the tachy language server is not running" })
  end
end

function M.send(client, short, params)
  return client:notify(M.method(short), params)
end

local function real(path)
  return vim.uv.fs_realpath(path) or vim.fs.normalize(path)
end

--- The file path of a file:// uri (nil for other schemes).
function M.uri_path(uri)
  if type(uri) ~= "string" or not uri:match("^file:") then
    return nil
  end
  return vim.uri_to_fname(uri)
end

--- The loaded buffer showing the file of `uri`, or nil.
function M.buf_for_uri(uri)
  local path = M.uri_path(uri)
  if not path then
    return nil
  end
  local want = real(path)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == "" then
      local name = vim.api.nvim_buf_get_name(buf)
      if name ~= "" and (name == path or real(name) == want) then
        return buf
      end
    end
  end
  return nil
end

--- The text :write would put on disk for `buf`.
function M.buffer_text(buf)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local nl = vim.bo[buf].fileformat == "dos" and "\r\n" or (vim.bo[buf].fileformat == "mac" and "\r" or "\n")
  local text = table.concat(lines, nl)
  local eol = vim.bo[buf].eol or (vim.bo[buf].fixeol and not vim.bo[buf].binary)
  if eol and not (#lines == 1 and lines[1] == "") then
    text = text .. nl
  end
  return text
end

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local data = f:read("*a")
  f:close()
  return data
end

--- Split text into lines (a trailing newline ends the last line, not a new one).
function M.split_lines(text)
  if text == nil or text == "" then
    return {}
  end
  local lines = vim.split(text, "\n", { plain = true })
  if lines[#lines] == "" then
    table.remove(lines)
  end
  for i, line in ipairs(lines) do
    lines[i] = line:gsub("\r$", "")
  end
  return lines
end

--- Run `fn` on the main loop (LSP handlers may be called in a fast event).
function M.main(fn)
  return function(...)
    if vim.in_fast_event() then
      local args = { n = select("#", ...), ... }
      vim.schedule(function()
        fn(unpack(args, 1, args.n))
      end)
    else
      return fn(...)
    end
  end
end

return M
