package sandboxhelper

// MaxRoots bounds a sandbox's writable and readable roots each: the parent refuses a
// spec beyond it (invalid-spec), and the helper bounds the mount descriptors it receives
// by it.
const MaxRoots = 32
