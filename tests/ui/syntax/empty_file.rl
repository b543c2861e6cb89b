// Only a comment. //~ W0101
