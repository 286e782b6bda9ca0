// The reference page: Swagger UI (swagger-ui-dist, served by this gateway) on /v1/openapi.json.
// The key given under "Authorize" also fetches the document, which then lists that key's
// tenant's deployed functions; it is kept in this browser's localStorage until "Logout".
/* global SwaggerUIBundle */
(function () {
  'use strict';
  var SCHEME = 'bearerAuth';
  var DOCUMENT = '/v1/openapi.json';

  /** The key Swagger UI keeps across reloads (persistAuthorization), if any. */
  function storedKey() {
    try {
      var saved = JSON.parse(window.localStorage.getItem('authorized') || '{}');
      return (saved[SCHEME] && saved[SCHEME].value) || null;
    } catch (e) {
      return null;
    }
  }

  var key = storedKey();

  /** Fetches the document again when the key changes: the functions it lists are the key's tenant's. */
  function ReloadOnAuthorize(system) {
    var reload = function () {
      system.specActions.download(DOCUMENT);
    };
    return {
      statePlugins: {
        auth: {
          wrapActions: {
            authorize: function (action) {
              return function (payload) {
                var result = action(payload);
                if (payload && payload[SCHEME] && payload[SCHEME].value) {
                  key = payload[SCHEME].value;
                  reload();
                }
                return result;
              };
            },
            logout: function (action) {
              return function (payload) {
                var result = action(payload);
                key = null;
                reload();
                return result;
              };
            },
          },
        },
      },
    };
  }

  window.ui = SwaggerUIBundle({
    url: DOCUMENT,
    dom_id: '#swagger-ui',
    deepLinking: true,
    persistAuthorization: true,
    tryItOutEnabled: true,
    displayRequestDuration: true,
    // The default badge sends the document to a public validator: this page works offline.
    validatorUrl: null,
    plugins: [ReloadOnAuthorize],
    requestInterceptor: function (request) {
      if (request.loadSpec && key) request.headers.Authorization = 'Bearer ' + key;
      return request;
    },
  });
})();
