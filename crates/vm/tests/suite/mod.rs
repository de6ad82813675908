mod pause;
mod template;
mod workspace_identity;
