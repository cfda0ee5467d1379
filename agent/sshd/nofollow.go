package sshd

import "syscall"

// syscallNoFollow refuses to open a link where a file is expected.
const syscallNoFollow = syscall.O_NOFOLLOW
