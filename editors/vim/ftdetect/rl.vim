" `.rl` files are rlc job descriptions. Vim's own filetype.vim maps `*.rl` to Ragel and ftdetect
" scripts run after it, so this sets the filetype outright instead of using `setfiletype`.
autocmd BufNewFile,BufRead *.rl set filetype=rl
