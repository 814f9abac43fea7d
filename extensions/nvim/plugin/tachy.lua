-- tachy: commands and autocommands. The language server itself is configured by
-- lsp/tachy.lua and started by require('tachy').setup{} or vim.lsp.enable('tachy').
if vim.g.loaded_tachy then
  return
end
vim.g.loaded_tachy = true

if vim.fn.has("nvim-0.11") == 0 then
  vim.notify("tachy needs Neovim 0.11 or newer", vim.log.levels.ERROR)
  return
end

local command = vim.api.nvim_create_user_command

command("TachySearch", function(args)
  require("tachy.search").run(args.args)
end, { nargs = "+", desc = "tachy: search the code index (results in the quickfix list)" })

command("TachyAgent", function(args)
  local opts = {}
  if args.range > 0 then
    opts.range = { args.line1, args.line2 }
  end
  require("tachy.chat").start(args.args, opts)
end, { nargs = "*", range = true, desc = "tachy: run the agent on a prompt (with the selected lines)" })

command("TachyCancel", function(args)
  require("tachy.chat").cancel(args.args)
end, { nargs = "?", desc = "tachy: cancel the running agent run" })

local function review_command(accept)
  return function(args)
    require("tachy.review").command(accept, args.args, args.bang)
  end
end
local review_opts = function(what)
  return {
    nargs = "?",
    bang = true,
    complete = function(lead)
      return require("tachy.review").complete(lead, what == "accept")
    end,
    desc = "tachy: " .. what .. " a proposed edit (an id, 'all', or the one under the cursor; ! for all of this run)",
  }
end
command("TachyAccept", review_command(true), review_opts("accept"))
command("TachyReject", review_command(false), review_opts("reject"))

local group = vim.api.nvim_create_augroup("tachy", { clear = true })

vim.api.nvim_create_autocmd("DiagnosticChanged", {
  group = group,
  callback = function(ev)
    require("tachy.diagnostics").changed(ev.buf)
  end,
})

vim.api.nvim_create_autocmd("LspProgress", {
  group = group,
  callback = function(ev)
    require("tachy.status").on_progress(ev)
  end,
})

vim.api.nvim_create_autocmd("LspAttach", {
  group = group,
  callback = function(ev)
    local client = vim.lsp.get_client_by_id(ev.data.client_id)
    if client and client.name == "tachy" then
      require("tachy.status").announce(client)
      require("tachy.status").refresh(client)
      require("tachy.diagnostics").all()
    end
  end,
})

vim.api.nvim_create_autocmd("BufReadPost", {
  group = group,
  callback = function(ev)
    local review = package.loaded["tachy.review"]
    if review then
      review.on_buf_read(ev.buf)
    end
  end,
})
