--- glimpse.init -- the parameter initialisers (they live in glimpse/nn_init.lua).
--
-- glimpse maps `glimpse.init` to require "glimpse.init", which resolves to this file.  The
-- name has a second meaning to Lua: with "?/init.lua" on package.path (the default path of a
-- stock lua5.4, and `make install` puts this folder there), a plain `require "glimpse"` finds
-- this file before the C module glimpse.so on package.cpath.  So when loaded under the name
-- "glimpse" this file loads and returns the C module instead; under any other name it
-- returns the initialisers.
local modname = ...

if modname == "glimpse" then
  local path, err = package.searchpath("glimpse", package.cpath)
  if not path then error("glimpse: the C module glimpse.so is not on package.cpath:" .. err, 2) end
  local open, lerr = package.loadlib(path, "luaopen_glimpse")
  if not open then error("glimpse: cannot load " .. path .. ": " .. tostring(lerr), 2) end
  return open()
end

return require "glimpse.nn_init"
