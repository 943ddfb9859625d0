-- datasets/batches.lua -- moved into the library as glimpse.data.batches (bindings/glimpse/data/batches.lua);
-- this name is kept for scripts that require it.
return require "glimpse.data.batches"
