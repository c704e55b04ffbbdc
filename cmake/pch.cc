// The translation unit the precompiled-header donors are built from
// (cmake/pch.cmake); it has no code of its own.
