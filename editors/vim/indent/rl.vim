" Indentation for `.rl` files: one level inside each unclosed `{`, `(` or `[` of the lines above,
" one level less on a line that starts with a closer.
if exists('b:did_indent')
  finish
endif
let b:did_indent = 1

setlocal indentexpr=RlIndent(v:lnum)
setlocal indentkeys=0{,0},0),0],!^F,o,O
setlocal autoindent
let b:undo_indent = 'setlocal indentexpr< indentkeys< autoindent<'

if exists('*RlIndent')
  finish
endif

" The line without its strings and its `//` comment, so brackets inside them do not count.
function! s:Code(lnum) abort
  let line = substitute(getline(a:lnum), '\v"%([^"\\]|\\.)*"', '""', 'g')
  return substitute(line, '//.*$', '', '')
endfunction

function! RlIndent(lnum) abort
  let prev = prevnonblank(a:lnum - 1)
  if prev == 0
    return 0
  endif
  let code = s:Code(prev)
  " Closers at the start of the previous line were already dedented there.
  let leading = strlen(matchstr(code, '^\s*[})\]]*')) - strlen(matchstr(code, '^\s*'))
  let opens = strlen(substitute(code, '[^{(\[]', '', 'g'))
  let closes = strlen(substitute(code, '[^})\]]', '', 'g')) - leading
  let ind = indent(prev)
  if opens > closes
    let ind += shiftwidth()
  elseif opens < closes
    let ind -= shiftwidth()
  endif
  if getline(a:lnum) =~# '^\s*[})\]]'
    let ind -= shiftwidth()
  endif
  return max([ind, 0])
endfunction
