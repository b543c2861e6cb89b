" Strips the indentation of each file given, reindents it with indent/rl.vim (`gg=G`) and
" compares with the file: the committed .rl files are the expected indentation.
" Run: RESULT=FILE vim -N -u NONE -i NONE -es -S editors/vim/test/indent.vim FILE... (from the repo root)
set nocompatible hidden
let &runtimepath = getcwd() . '/editors/vim,' . &runtimepath
filetype plugin indent on
let s:failed = []
for s:file in argv()
  execute 'edit ' . fnameescape(s:file)
  if &filetype !=# 'rl'
    call add(s:failed, s:file . ': filetype is "' . &filetype . '", not rl')
    continue
  endif
  let s:want = getline(1, '$')
  silent %substitute/^\s\+//e
  normal! gg=G
  let s:got = getline(1, '$')
  for s:i in range(len(s:want))
    if s:got[s:i] !=# s:want[s:i]
      call add(s:failed, printf('%s:%d: reindented as "%s"', s:file, s:i + 1, s:got[s:i]))
      break
    endif
  endfor
  setlocal nomodified
endfor
" Vim in Ex mode loses output to stderr at exit, so failures go to the file $RESULT.
call writefile(s:failed, empty($RESULT) ? '/dev/stderr' : $RESULT)
execute (empty(s:failed) ? 'qall!' : 'cquit!')
