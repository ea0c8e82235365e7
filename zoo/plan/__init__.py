"""Planning over every family: layouts, dry runs, the zoo module's parameter shapes, synthetic folders."""
