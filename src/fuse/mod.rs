//! The FUSE filesystem: groups and variables as directories, metadata as files, values as a
//! flat `data` file per variable. The only layer that knows about inodes.
