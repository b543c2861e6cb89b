" Checks the highlight group of chosen words of editors/test/constructs.rl.
" Run: RESULT=FILE vim -N -u NONE -i NONE -es -S editors/vim/test/syntax.vim (from the repo root)
set nocompatible
let &runtimepath = getcwd() . '/editors/vim,' . &runtimepath
filetype plugin indent on
syntax on
edit editors/test/constructs.rl

" [pattern of the word (`\zs` marks its start), the syntax group expected there]
let s:cases = [
  \ ['^\zsimport', 'rlItem'], ['\<\zsas\> g', 'rlKeyword'], ['^\zspub', 'rlItem'],
  \ ['= \zscpu(', 'rlFunctionCall'], ['\zs80GiB', 'rlNumber'], ['80\zsGiB', 'rlUnit'],
  \ ['989\zsTFLOPS', 'rlUnit'], ['3\.35\zsTBps', 'rlUnit'], ['1_\zs000KB', 'rlNumber'],
  \ ['\zs"data/prompts', 'rlString'], ['\zs\\"quoted', 'rlEscape'], ['^\zs/// The policy', 'rlDocComment'],
  \ ['^\zs//!', 'rlDocComment'], ['^\zs// Imports', 'rlComment'], [': \zsCausalLM', 'rlRoleKind'],
  \ ['\zsValueModel', 'rlRoleKind'], ['\zsfalse', 'rlBoolean'], ['struct \zsSample', 'rlTypeName'],
  \ ['tokens: \zsTokens', 'rlType'], ['limit: \zsi64', 'rlType'], ['with \zsdp(2)', 'rlLayout'],
  \ ['\zsmicro(4)', 'rlLayout'], ['\zsfsdp(1)', 'rlLayout'], ['\zsauto$', 'rlKeyword'],
  \ ['fn \zsexact', 'rlFunction'], ['-> \zsf32\[B\] {', 'rlType'], ['\zs&&', 'rlOperator'],
  \ ['\zs||', 'rlOperator'], ['resp \zs==', 'rlOperator'], ['\zs->', 'rlOperator'],
  \ ['0\zs\.\.2', 'rlOperator'], ['scan \zsreverse', 'rlContextual'], ['reverse \zsover', 'rlContextual'],
  \ ['scan \zsforward', 'rlContextual'], ['50 \zssteps', 'rlContextual'], ['1 \zsstep ', 'rlContextual'],
  \ ['loop \zsstep', ''], ['0\.\.\zssteps', ''], ['\zsemit', 'rlControl'], ['\zscheckpoint', 'rlControl'],
  \ ['pipeline \zstrain', 'rlFunction'], ['\.\zsupdate', 'rlFunctionCall'], ['\zsevery', 'rlControl'],
  \ ['actor: \zsCausalLM', 'rlRoleKind'], ['judge: \zsRewardModel', 'rlRoleKind'],
  \ ['prompts: \zsDataset', 'rlType'], ['checker: \zsVerifier', 'rlType'],
  \ ['sandbox: \zsEnvironment', 'rlType'], ['reward: \zsFn', 'rlType'],
  \ ]
let s:failed = []
for [s:pattern, s:want] in s:cases
  call cursor(1, 1)
  let [s:line, s:col] = searchpos(s:pattern, 'cW')
  let s:got = s:line ? synIDattr(synID(s:line, s:col, 1), 'name') : '(no match)'
  if s:got !=# s:want
    call add(s:failed, printf('/%s/ at %d:%d is "%s", want "%s"', s:pattern, s:line, s:col, s:got, s:want))
  endif
endfor
" Vim in Ex mode loses output to stderr at exit, so failures go to the file $RESULT.
call writefile(s:failed, empty($RESULT) ? '/dev/stderr' : $RESULT)
execute (empty(s:failed) ? 'qall!' : 'cquit!')
