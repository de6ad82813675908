mod nested_runs;
mod plain_http;
mod secret_ports;
