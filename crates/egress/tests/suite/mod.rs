mod plain_http;
