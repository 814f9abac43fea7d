-- :TachySearch: tachy/search results into the quickfix list, and a picker
-- (vim.ui.select) to jump to one.
local util = require("tachy.util")
local config = require("tachy.config")

local M = {}

local function first_line(snippet)
  for _, line in ipairs(vim.split(snippet or "", "\n", { plain = true })) do
    if vim.trim(line) ~= "" then
      return vim.trim(line)
    end
  end
  return ""
end

--- Quickfix items for tachy/search results.
function M.items(results)
  local items = {}
  for _, r in ipairs(results or {}) do
    local text = first_line(r.snippet)
    if r.symbol and r.symbol ~= "" then
      text = r.symbol .. ": " .. text
    end
    table.insert(items, {
      filename = util.uri_path(r.uri) or r.uri,
      lnum = r.range.start.line + 1,
      end_lnum = math.max(r.range.start.line + 1, r.range["end"].line),
      col = 1,
      text = ("%s  (%.2f)"):format(text, r.score or 0),
    })
  end
  return items
end

--- Search the index; fills the quickfix list and offers a picker.
--- opts: { limit = n, picker = "select" | "quickfix" | false, on_done = function(items) }
function M.run(query, opts)
  opts = opts or {}
  if vim.trim(query or "") == "" then
    return util.notify("give a query: :TachySearch {query}", vim.log.levels.ERROR)
  end
  local client = util.client()
  local params = { query = query, limit = opts.limit or config.options.search.limit }
  util.request(client, "search", params, function(err, result)
    if err then
      util.notify("search failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    local items = M.items(result.results)
    vim.fn.setqflist({}, " ", { title = "tachy search: " .. query, items = items })
    if #items == 0 then
      util.notify("nothing found for " .. query, vim.log.levels.WARN)
    else
      local picker = opts.picker
      if picker == nil then
        picker = config.options.search.picker
      end
      if picker == "quickfix" then
        vim.cmd("botright copen")
      elseif picker == "select" then
        vim.ui.select(items, {
          prompt = "tachy search: " .. query,
          format_item = function(item)
            return ("%s:%d  %s"):format(vim.fn.fnamemodify(item.filename, ":~:."), item.lnum, item.text)
          end,
        }, function(_, idx)
          if idx then
            vim.cmd("cc " .. idx)
          end
        end)
      end
    end
    if opts.on_done then
      opts.on_done(items)
    end
  end)
end

return M
