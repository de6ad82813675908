mod pause;
mod template;
