module corral-bench-peer

go 1.19
