" Comments and layout for `.rl` files: `//` comments, two-space indent as in examples/.
if exists('b:did_ftplugin')
  finish
endif
let b:did_ftplugin = 1

setlocal commentstring=//\ %s
" `///` and `//!` are doc comments: continue them as such when wrapping or opening a line.
setlocal comments=:///,://!,://
setlocal formatoptions-=t formatoptions+=croql
setlocal shiftwidth=2 softtabstop=2 expandtab
setlocal suffixesadd=.rl

let b:undo_ftplugin = 'setlocal commentstring< comments< formatoptions< shiftwidth< softtabstop< expandtab< suffixesadd<'
